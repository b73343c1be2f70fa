package resilience

import (
	"context"
	"time"
)

// Tracer follows calls through a pipeline and each of their attempts, to
// record them as spans of a trace (package otelevents has one for
// OpenTelemetry). Unlike a [Listener] it sees the call's context, and may
// return a new one, so the spans it starts are the parents of whatever the
// operation starts, such as the next hop's client span. Its methods are
// called on the goroutine of the call (of the attempt, for a hedge), must
// be quick, and must be safe for concurrent use.
type Tracer interface {
	// StartCall is called as a call named name enters the pipeline, before
	// any stage; it returns the context for the rest of the call and the
	// call's trace, whose End is called once as the call returns.
	StartCall(ctx context.Context, name string) (context.Context, CallTrace)
}

// CallTrace follows one call. Its methods may be called from several
// goroutines at once when attempts are hedged.
type CallTrace interface {
	// StartAttempt is called as attempt a starts, with the call's context;
	// it returns the context for the attempt and a function that is called
	// once with the attempt's error (nil on success) when it ends.
	StartAttempt(ctx context.Context, a AttemptInfo) (context.Context, func(err error))
	// End is called once as the call returns, with its error (nil on
	// success).
	End(err error)
}

// AttemptInfo describes an attempt as it starts, for a [Tracer].
type AttemptInfo struct {
	// Number is the attempt's number within its call, 1 for the first.
	Number int
	// Delay is how long the call waited since the previous attempt ended
	// (the retry's backoff), 0 for the first attempt or a hedge.
	Delay time.Duration
	// RetryAfter is the dependency's hint (see [RetryAfter]) carried by the
	// previous attempt's error, as the retry used it (capped by the retry
	// policy's longest delay), which set a floor under Delay; 0 if none.
	RetryAfter time.Duration
	// State is the breaker's state as the attempt starts; [StateClosed]
	// without a breaker.
	State State
	// Hedge is true for an attempt sent while an earlier one of the call
	// was still running (see package hedge).
	Hedge bool
}
