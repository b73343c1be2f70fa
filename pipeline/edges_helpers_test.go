package pipeline

import "runtime"

func runtimeGoexit() { runtime.Goexit() }
