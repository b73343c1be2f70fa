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

// maxJoins is the deepest nesting of joins (Unwrap() []error) that
// Acyclic walks: a join that holds itself nests for ever.
const maxJoins = 10_000

// Acyclic returns err, or, if its tree (as Unwrap walks it) does not end,
// as that of an error that wraps itself does not, an error with err's
// message that wraps nothing: errors.Is, errors.As and
// resilience.Classify would walk such a tree for ever, and the stages ask
// them of every failure. A chain is known to loop when an error comes
// back in it (compared with ==); a join, when joins nest past maxJoins. A
// tree that ends, however wide or however often it holds one branch, is
// returned as it is, as is an error whose methods panic (see Safely).
// The error given for one that does not end keeps the class its top
// error gives itself (a ResilienceClass method of its own).
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

// endsSafely reports whether err's tree ends; true if a method panics or
// two errors of it cannot be compared.
func endsSafely(err error) (ok bool) {
	defer func() {
		if recover() != nil {
			ok = true
		}
	}()
	return ends(err, 0)
}

// ends reports whether err's tree ends, joins nested depth deep above it:
// along a chain, a slow walker one step in two behind finds a loop when
// the fast one meets it (Floyd's).
func ends(err error, depth int) bool {
	slow := err
	for step := 0; ; step++ {
		switch u := err.(type) {
		case nil:
			return true
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			if depth >= maxJoins {
				return false
			}
			for _, e := range u.Unwrap() {
				if !ends(e, depth+1) {
					return false
				}
			}
			return true
		default:
			return true
		}
		if step%2 == 1 {
			slow = slow.(interface{ Unwrap() error }).Unwrap()
		}
		if err != nil && err == slow {
			return false
		}
	}
}

// endless stands for an error whose tree does not end: its message, the
// class its top error gives itself, and nothing to unwrap.
type endless struct{ err error }

func (e endless) Error() string { return e.err.Error() }

// ResilienceClass returns the class the top error gives itself, or
// transient.
func (e endless) ResilienceClass() resilience.Class {
	if c, ok := e.err.(interface{ ResilienceClass() resilience.Class }); ok {
		return c.ResilienceClass()
	}
	return resilience.ClassTransient
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
