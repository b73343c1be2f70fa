package idempotency_test

import "runtime"

func runtimeGoexit() { runtime.Goexit() }
