package safe

// Discard calls fn with v, a result a hedged call does not return
// (pipeline.Discard's function), and logs and stops a panic of fn: it
// runs on the caller's goroutine while the call's race is settled, or on
// a goroutine of the pipeline's after the call returned, neither of which
// may be left to it. A runtime.Goexit goes on.
func Discard[T any](fn func(T), v T) {
	defer discardRecovered()
	fn(v)
}

// discardRecovered, deferred, logs and stops a panic of a Discard
// function.
func discardRecovered() {
	if r := recover(); r != nil {
		LogPanic("resiliencekit: a Discard function panicked; the call goes on as if it had not", "panic", r)
	}
}
