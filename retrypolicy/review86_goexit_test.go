package retrypolicy

import "runtime"

var runtimeGoexitFn = runtime.Goexit
