// Package sendtime tells a pipeline's breaker when the attempt that
// answered a call with success was sent, where that was well after the
// breaker admitted the call: after a wait for a slot of a concurrency
// limit (or of WaitWhenOpen's pacer), or as a retry. The breaker times the
// dependency's answers, its slowest recent one being the least time a
// call must have had for its caller's deadline to count against the
// dependency: a queue or a backoff before the attempt was the caller's
// time, not the dependency's.
//
// A call that its caller's deadline ended is still judged by the time it
// had from its admission, queue and all: a dependency that hangs frees a
// limit's slots only as deadlines pass, so that every attempt is sent from
// the queue with little time left, and judged from its sending none would
// count, and the breaker would never open (review110).
package sendtime

import "github.com/resiliencekit/resiliencekit/internal/monotime"

// Success is what a pipeline gives its breaker, as its operation's error,
// for a call that succeeded with an attempt sent at At. The breaker takes
// it for nil, timing the answer from At.
type Success struct {
	At monotime.Reading
}

// Error returns "": a Success is no failure, and no caller sees it.
func (*Success) Error() string { return "" }

// Open returns when the attempt of a call that ended with err was sent,
// and err as its caller sees it: for a *Success, its At and nil; else at
// and err as they are.
func Open(at monotime.Reading, err error) (monotime.Reading, error) {
	if s, ok := err.(*Success); ok {
		return s.At, nil
	}
	return at, err
}
