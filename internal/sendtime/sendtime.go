// Package sendtime tells a pipeline's breaker when the attempt that
// answered a call with success was sent, where that was a retry: the
// breaker times the dependency's answers, its slowest recent one being
// the least time a call must have had for its caller's deadline to count
// against the dependency, and a retry's backoff (a Retry-After among
// them) is the caller's time, not the dependency's.
//
// A wait at a pipeline's concurrency limit is not taken out, neither of
// an answer's time nor of the time a call had: a dependency that hangs
// frees a limit's slots only as deadlines pass, so that every attempt is
// sent from the queue with little time left, and judged from its sending
// none would count, and the breaker would never open (review110); and an
// answer timed from its sending, its queue left out, made the breaker
// count the calls a healthy dependency's own queue had made late
// (review35's figures).
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
