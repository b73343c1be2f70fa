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

// maxWalk is the most errors Acyclic visits in an error's tree: far past
// any chain a program builds, and a few milliseconds for one that wraps
// itself.
const maxWalk = 1 << 16

// Acyclic returns err, or, if its tree (as Unwrap walks it) does not end
// within maxWalk errors, as that of an error that wraps itself does not,
// an error with err's message that wraps nothing: errors.Is, errors.As
// and resilience.Classify would walk such a tree for ever, and the stages
// ask them of every failure. An error whose Unwrap panics is returned as
// it is (see Safely).
func Acyclic(err error) error {
	switch err.(type) {
	case nil:
		return nil
	case interface{ Unwrap() error }, interface{ Unwrap() []error }:
		if !endsSafely(err) {
			return endless{err}
		}
	}
	return err
}

// endsSafely reports whether err's tree ends within maxWalk errors; true
// if a method panics.
func endsSafely(err error) (ok bool) {
	defer func() {
		if recover() != nil {
			ok = true
		}
	}()
	n := 0
	return ends(err, &n)
}

// ends reports whether err's tree ends within maxWalk errors, n counting
// those visited.
func ends(err error, n *int) bool {
	for err != nil {
		if *n++; *n > maxWalk {
			return false
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if !ends(e, n) {
					return false
				}
			}
			return true
		default:
			return true
		}
	}
	return true
}

// endless stands for an error whose tree does not end: its message, and
// nothing to unwrap.
type endless struct{ err error }

func (e endless) Error() string { return e.err.Error() }
