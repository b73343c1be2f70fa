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
func Safely(err error) (c resilience.Class, ok bool) {
	defer func() {
		if recover() != nil {
			c, ok = 0, false
		}
	}()
	return resilience.Classify(err), true
}

// Holds returns test(err), or false if a method of err panicked as test
// asked it.
func Holds(test func(error) bool, err error) (yes bool) {
	defer func() {
		if recover() != nil {
			yes = false
		}
	}()
	return test(err)
}

// RetryAfter returns resilience.RetryAfterHint(err), or false if a method
// of err panicked as it was asked.
func RetryAfter(err error) (d time.Duration, ok bool) {
	defer func() {
		if recover() != nil {
			d, ok = 0, false
		}
	}()
	return resilience.RetryAfterHint(err)
}
