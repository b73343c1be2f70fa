package retrypolicy_test

import "runtime"

func runtimeGoexit() { runtime.Goexit() }
