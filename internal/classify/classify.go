// Package classify classifies an operation's error for the stages that
// learn from it without letting the error's own methods (Unwrap, Is,
// ResilienceClass) panic into them: an error that the caller's code made
// wrong, such as a typed nil whose method dereferences it, says nothing of
// the dependency, and a stage that classifies under a lock would be left
// holding it.
package classify

import (
	"time"

	"github.com/resiliencekit/resiliencekit/resilience"
)

// Safely returns resilience.Classify(err), or false if a method of err
// panicked as it was asked.
func Safely(err error) (resilience.Class, bool) { return Ask(resilience.Classify, err) }

// Holds returns test(err), or false if a method of err panicked as test
// asked it.
func Holds(test func(error) bool, err error) bool {
	yes, _ := Ask(test, err)
	return yes
}

// RetryAfter returns resilience.RetryAfterHint(err), or false if a method
// of err panicked as it was asked.
func RetryAfter(err error) (time.Duration, bool) {
	h, _ := Ask(hintOf, err)
	return h.d, h.ok
}

// hint is resilience.RetryAfterHint's answer.
type hint struct {
	d  time.Duration
	ok bool
}

func hintOf(err error) hint {
	d, ok := resilience.RetryAfterHint(err)
	return hint{d, ok}
}

// Ask returns f(err), or the zero T and false if a method of err panicked
// as f asked it.
func Ask[T any](f func(error) T, err error) (v T, ok bool) {
	defer func() {
		if recover() != nil {
			var zero T
			v, ok = zero, false
		}
	}()
	return f(err), true
}

// unsent is an attempt's error that says the attempt was not sent: a gate
// of the pipeline's refused it, or the caller's context ended as it
// waited for one.
type unsent struct{ error }

func (e unsent) Unwrap() error { return e.error }

// Unsent marks err, an attempt's error, as that of an attempt that was
// not sent, for the retry loop that made it ([Sent]); nil for nil.
func Unsent(err error) error {
	if err == nil {
		return nil
	}
	return unsent{err}
}

// Sent returns err without the mark of [Unsent], and whether the attempt
// whose error it is was sent: a retry that was not gives the quota its
// charge back (review160), one that was keeps it whatever its error
// (review132: a reply over the client's size limit).
func Sent(err error) (error, bool) {
	if u, ok := err.(unsent); ok {
		return u.error, false
	}
	return err, true
}
