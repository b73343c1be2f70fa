package pipeline_test

import "runtime"

func runtimeGoexit() { runtime.Goexit() }
