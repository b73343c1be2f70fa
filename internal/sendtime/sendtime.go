// Package sendtime tells a pipeline's breaker when the attempt that
// answered its call was sent, where that was well after the breaker
// admitted the call: after a wait for a slot of a concurrency limit, or
// as a retry. The breaker judges a call by the dependency's part in it:
// it times an answer from when its attempt was sent, not from a queue or
// a backoff before it, and takes a call that its caller's deadline ended
// to have had the time left as its attempt was sent.
package sendtime

import "github.com/resiliencekit/resiliencekit/internal/monotime"

// Late is what a pipeline gives its breaker for a call whose last
// attempt was sent at At: its error, Err, nil for a success. The breaker
// takes Err out before it judges or returns it.
type Late struct {
	Err error
	At  monotime.Reading
}

// Error returns Err's message, or "" for a success.
func (l *Late) Error() string {
	if l.Err == nil {
		return ""
	}
	return l.Err.Error()
}

// Unwrap returns Err.
func (l *Late) Unwrap() error { return l.Err }

// Open returns when the attempt of a call that ended with err was sent,
// and err's own error, for an err that is a *Late; else at and err as
// they are.
func Open(at monotime.Reading, err error) (monotime.Reading, error) {
	if l, ok := err.(*Late); ok {
		return l.At, l.Err
	}
	return at, err
}
