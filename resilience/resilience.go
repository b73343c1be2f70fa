// Package resilience is the shared vocabulary of resiliencekit: the shape of
// an operation and the classes of error that the retry and breaker stages
// agree on.
//
// Every error an operation returns falls in one [Class]:
//
//   - [ClassTransient]: a blip such as a timeout, a reset connection or an
//     HTTP 502/503/504. It is retried and counts as a breaker failure. Any
//     error not marked otherwise is transient.
//   - [ClassPermanent]: the request itself is at fault (HTTP 400/401/403, a
//     business-rule error). It is not retried and does not trip a breaker,
//     since the dependency answered. Mark one with [Permanent].
//   - [ClassTerminal]: the dependency failed in a way that retrying now will
//     not fix (HTTP 500/501, a rejection by an open breaker). It is not
//     retried but counts as a breaker failure. Mark one with [Terminal].
//   - [ClassCanceled]: the caller gave up ([context.Canceled]). It is neither
//     retried nor counted.
//   - [ClassRejected]: the attempt failed on the caller's side, and the
//     dependency did not cause it: a stage refused it to shed load (a
//     client-side throttle, a full concurrency limit), or the client itself
//     could not send the request or take the answer (a bad URL or
//     unsupported scheme, a certificate it does not trust, a message over
//     its size limit, its own encoding error). It is neither retried (the
//     same request fails the same way) nor counted by a breaker, either
//     way: it is no evidence of the dependency's health. Mark one with
//     [Rejected].
//   - [ClassPending]: the dependency answered that the work is not done
//     yet (a 409 "in progress" to a repeat of a keyed request whose first
//     still runs). It is retried, but counted by a breaker neither as a
//     failure nor as a success: the dependency did nothing wrong, and the
//     call has not succeeded. Mark one with [Pending].
//
// The package also names the states of a circuit breaker ([State]), which
// events report.
//
// An error can also carry a server's hint of how long to wait before the next
// attempt ([RetryAfter]). All wrappers keep the cause reachable through
// [errors.Is] and [errors.As].
//
// The package depends only on the standard library.
package resilience

import (
	"context"
	"errors"
	"time"
)

// Operation is a call to a dependency. It must honour ctx: return soon after
// ctx is done.
type Operation[T any] func(ctx context.Context) (T, error)

// Class is how the retry and breaker stages treat an error.
type Class uint8

// The classes of an operation's outcome.
const (
	// ClassSuccess is a nil error.
	ClassSuccess Class = iota
	// ClassTransient is retried and counts as a breaker failure.
	ClassTransient
	// ClassPermanent is not retried and is not a breaker failure.
	ClassPermanent
	// ClassTerminal is not retried and counts as a breaker failure.
	ClassTerminal
	// ClassCanceled is neither retried nor counted by a breaker.
	ClassCanceled
	// ClassRejected is an attempt that failed on the caller's side,
	// through no fault of the dependency: refused to shed load, or an
	// error the client made before or after the exchange. It is neither
	// retried nor counted by a breaker.
	ClassRejected
	// ClassPending is a dependency's answer that the call's work is not
	// done yet and may be asked for again, such as a 409 "in progress" to
	// a repeat of a keyed request whose first still runs (package
	// idempotency): retried, after the answer's Retry-After, but neither
	// a success nor a failure for a breaker, which leaves it out. The
	// dependency answered: a throttle or a limit takes it for an answer.
	ClassPending
)

// String returns the lower-case name of c.
func (c Class) String() string {
	switch c {
	case ClassSuccess:
		return "success"
	case ClassTransient:
		return "transient"
	case ClassPermanent:
		return "permanent"
	case ClassTerminal:
		return "terminal"
	case ClassCanceled:
		return "canceled"
	case ClassRejected:
		return "rejected"
	case ClassPending:
		return "pending"
	default:
		return "unknown"
	}
}

// Retryable reports whether an error of class c is worth another attempt.
func (c Class) Retryable() bool { return c == ClassTransient || c == ClassPending }

// Failure reports whether an error of class c counts against the health of
// the dependency.
func (c Class) Failure() bool { return c == ClassTransient || c == ClassTerminal }

// classer is implemented by errors that know their own class, such as those
// made by [Permanent] and [Terminal], or a typed error of an integration.
type classer interface {
	ResilienceClass() Class
}

// Classify returns the class of err. The first error in err's chain with a
// method ResilienceClass() Class decides (the chain as Unwrap gives it,
// depth first; an error's As method is not asked, so that classifying
// allocates nothing); otherwise [context.Canceled] in the chain is
// [ClassCanceled], and anything else non-nil is [ClassTransient]. A
// [context.DeadlineExceeded] is a timeout, hence transient. An error is
// never [ClassSuccess]: an error that gives itself a class no error can
// have (ClassSuccess, the zero value an integration may leave unset, or a
// value with no name) is passed over, as one with no such method.
func Classify(err error) Class {
	switch e := err.(type) {
	case nil:
		return ClassSuccess
	case classer:
		if c := e.ResilienceClass(); c.valid() {
			return c
		}
	case interface{ Is(error) bool }, interface{ Unwrap() error }, interface{ Unwrap() []error }:
	default:
		// An error with nothing to ask, as most are: one type switch, whose
		// answer the runtime keeps for its type, instead of two walks.
		if err == context.Canceled {
			return ClassCanceled
		}
		return ClassTransient
	}
	if c, ok := ClassOf(err); ok {
		return c
	}
	if errors.Is(err, context.Canceled) {
		return ClassCanceled
	}
	return ClassTransient
}

// ClassOf returns the class that err, or the first error in its chain
// with one, was given: by [Permanent], [Terminal] or [Rejected], or by a
// method ResilienceClass() Class of its own; ok is false if none was, where
// [Classify] falls back to [ClassCanceled] or [ClassTransient]. An error
// giving itself a class no error can have, ClassSuccess or one with no
// name, is passed over. It allocates nothing.
func ClassOf(err error) (c Class, ok bool) {
	if cl, ok := find(err, classed); ok {
		return cl.ResilienceClass(), true
	}
	return 0, false
}

// classed reports whether cl gives itself a class an error can have.
func classed(cl classer) bool { return cl.ResilienceClass().valid() }

// valid reports whether an error can be of class c.
func (c Class) valid() bool { return c > ClassSuccess && c <= ClassPending }

// find returns the first error in err's tree that is a T, and that want
// accepts if want is not nil, depth first as errors.As walks it. Unlike
// errors.As it does not allocate, which keeps the retry path lean; it does
// not call As methods.
func find[T any](err error, want func(T) bool) (T, bool) {
	for err != nil {
		if t, ok := err.(T); ok && (want == nil || want(t)) {
			return t, true
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if t, ok := find(e, want); ok {
					return t, true
				}
			}
			err = nil
		default:
			err = nil
		}
	}
	var zero T
	return zero, false
}

// classError marks its cause with a class.
type classError struct {
	err   error
	class Class
}

func (e *classError) Error() string          { return e.err.Error() }
func (e *classError) Unwrap() error          { return e.err }
func (e *classError) ResilienceClass() Class { return e.class }

// Permanent marks err as [ClassPermanent]: not retried, not a breaker
// failure. It returns nil for a nil err. The message is err's own.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &classError{err: err, class: ClassPermanent}
}

// Rejected marks err as [ClassRejected]: an error of the caller's side
// that the dependency did not cause (a refusal to shed load, or the
// client's own error before or after the exchange), neither retried nor
// counted by a breaker, as a failure or as a success. It returns nil for a
// nil err. The message is err's own.
func Rejected(err error) error {
	if err == nil {
		return nil
	}
	return &classError{err: err, class: ClassRejected}
}

// Pending marks err as [ClassPending]: the dependency's answer that the
// work is not done yet, retried but not counted by a breaker. It returns
// nil for a nil err. The message is err's own.
func Pending(err error) error {
	if err == nil {
		return nil
	}
	return &classError{err: err, class: ClassPending}
}

// Terminal marks err as [ClassTerminal]: not retried, but a breaker failure.
// It returns nil for a nil err. The message is err's own.
func Terminal(err error) error {
	if err == nil {
		return nil
	}
	return &classError{err: err, class: ClassTerminal}
}

// unrepeatable is a failure that retrying might fix but that the
// operation cannot repeat.
type unrepeatable struct{ classError }

// Unrepeatable marks err, a failure that a retry might have fixed, as one
// the operation cannot repeat, such as a stream whose messages outgrew the
// buffer that would replay them: [ClassTerminal] (not retried, a breaker
// failure), and reported by the retry stage as [EventNotRetried], so that
// a retry left out is never silent. It returns nil for a nil err. The
// message is err's own.
func Unrepeatable(err error) error {
	if err == nil {
		return nil
	}
	return &unrepeatable{classError{err: err, class: ClassTerminal}}
}

// IsUnrepeatable reports whether err was marked with [Unrepeatable].
func IsUnrepeatable(err error) bool {
	_, ok := find[*unrepeatable](err, nil)
	return ok
}

// IsPermanent reports whether err is the caller's fault: its class is
// [ClassPermanent], such as a bad request. A dependency's failure
// ([ClassTerminal], [ClassTransient]) is not, even when it is not retried;
// use [Classify] to tell those apart.
func IsPermanent(err error) bool {
	return Classify(err) == ClassPermanent
}

// RetryAfterError carries a dependency's hint of how long to wait before
// the next attempt, such as an HTTP Retry-After header. Its class is its
// cause's.
type RetryAfterError struct {
	// Err is the cause.
	Err error
	// Delay is the shortest wait the dependency asked for.
	Delay time.Duration
}

// Error returns the cause's message.
func (e *RetryAfterError) Error() string { return e.Err.Error() }

// Unwrap returns the cause.
func (e *RetryAfterError) Unwrap() error { return e.Err }

// RetryAfter wraps err with a hint to wait at least d before retrying. It
// returns nil for a nil err; a negative d counts as zero.
func RetryAfter(err error, d time.Duration) error {
	if err == nil {
		return nil
	}
	return &RetryAfterError{Err: err, Delay: max(d, 0)}
}

// RetryAfterHint returns the delay of the first [RetryAfterError] in err's
// chain, and whether there was one.
func RetryAfterHint(err error) (time.Duration, bool) {
	if ra, ok := find[*RetryAfterError](err, nil); ok {
		return ra.Delay, true
	}
	return 0, false
}
