package safe

import (
	"context"

	"github.com/resiliencekit/resiliencekit/resilience"
)

// The calls of a pipeline to its tracer, each guarded as a Listener
// guards its listeners: a panic in the tracer is logged, and the call
// goes on as if it had not happened, its outcome and the breaker's counts
// unchanged. A call whose StartCall panicked goes on untraced, and so
// does an attempt whose StartAttempt did. They allocate nothing.

// StartCall is t.StartCall(ctx, name); its trace is never nil.
func StartCall(t resilience.Tracer, ctx context.Context, name string) (context.Context, resilience.CallTrace) {
	out, ct := ctx, resilience.CallTrace(untraced{})
	func() {
		defer tracerRecovered("StartCall")
		if c, trace := t.StartCall(ctx, name); trace != nil {
			out, ct = c, trace
		}
	}()
	return out, ct
}

// StartAttempt is ct.StartAttempt(ctx, a).
func StartAttempt(ct resilience.CallTrace, ctx context.Context, a resilience.AttemptInfo) (context.Context, func(error)) {
	out := ctx
	var end func(error)
	func() {
		defer tracerRecovered("StartAttempt")
		out, end = ct.StartAttempt(ctx, a)
	}()
	if out == nil { // a tracer's fault: the attempt goes on with its own context
		out = ctx
	}
	return out, end
}

// EndAttempt is end(err), for the end function of an attempt's span.
func EndAttempt(end func(error), err error) {
	defer tracerRecovered("an attempt's end")
	end(err)
}

// EndCall is ct.End(err).
func EndCall(ct resilience.CallTrace, err error) {
	defer tracerRecovered("End")
	ct.End(err)
}

// untraced is the trace of a call whose StartCall panicked.
type untraced struct{}

func (untraced) StartAttempt(ctx context.Context, _ resilience.AttemptInfo) (context.Context, func(error)) {
	return ctx, nil
}
func (untraced) End(error) {}

// tracerRecovered, deferred, logs and stops a panic of a tracer (a
// runtime.Goexit goes on).
func tracerRecovered(in string) {
	if r := recover(); r != nil {
		LogPanic("resiliencekit: a tracer panicked; the call goes on as if it had not", "in", in, "panic", r)
	}
}
