package grpcclient

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/grpc/grpcsignal"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// defaultClasses are the classes of the failing codes that are not
// permanent by default.
var defaultClasses = map[codes.Code]resilience.Class{
	codes.Canceled:           resilience.ClassCanceled,
	codes.Unknown:            resilience.ClassTerminal,
	codes.InvalidArgument:    resilience.ClassPermanent,
	codes.DeadlineExceeded:   resilience.ClassTransient,
	codes.NotFound:           resilience.ClassPermanent,
	codes.AlreadyExists:      resilience.ClassPermanent,
	codes.PermissionDenied:   resilience.ClassPermanent,
	codes.ResourceExhausted:  resilience.ClassTransient,
	codes.FailedPrecondition: resilience.ClassPermanent,
	codes.Aborted:            resilience.ClassPermanent,
	codes.OutOfRange:         resilience.ClassPermanent,
	codes.Unimplemented:      resilience.ClassPermanent,
	codes.Internal:           resilience.ClassTerminal,
	codes.Unavailable:        resilience.ClassTransient,
	codes.DataLoss:           resilience.ClassTerminal,
	codes.Unauthenticated:    resilience.ClassPermanent,
}

// attemptError is the error of one attempt, with the class of its status
// code.
type attemptError struct {
	err   error
	st    *status.Status
	class resilience.Class
}

func (e *attemptError) Error() string                     { return e.err.Error() }
func (e *attemptError) Unwrap() error                     { return e.err }
func (e *attemptError) GRPCStatus() *status.Status        { return e.st }
func (e *attemptError) ResilienceClass() resilience.Class { return e.class }

// classify returns err, the error of one attempt whose trailer is
// trailer, marked with its class: that of its status code, made terminal
// by a pushback that forbids a retry, and with a pushback's delay as a
// retry-after hint; ABORTED (permanent by default) is transient with a
// pushback that allows a retry. An error without a status is left to
// resilience.Classify.
func (c *config) classify(err error, trailer metadata.MD) error {
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	class := resilience.ClassTerminal // a code from beyond the standard: as UNKNOWN
	if code := st.Code(); code <= maxCode {
		class = c.classes[code]
	}
	e := &attemptError{err: err, st: st, class: class}
	if st.Code() == codes.Aborted && class == resilience.ClassPermanent {
		// ABORTED with a pushback says "try again later": a repeat of a
		// keyed call still running (package grpcidempotency).
		if d, retry, ok := grpcsignal.Pushback(trailer); ok && retry {
			e.class = resilience.ClassTransient
			return resilience.RetryAfter(e, d)
		}
	}
	if class != resilience.ClassTransient && class != resilience.ClassTerminal {
		return e
	}
	d, retry, ok := grpcsignal.Pushback(trailer)
	switch {
	case !ok:
		return e
	case !retry:
		e.class = resilience.ClassTerminal // asked not to retry: not here
		return e
	case class == resilience.ClassTransient:
		return resilience.RetryAfter(e, d)
	}
	return e
}

// Error is the error of a call that an [Interceptor] made: it unwraps to
// what the pipeline returned, so that errors.Is matches [breaker.ErrOpen],
// [retrypolicy.ErrOutOfTime] and the rest, and it carries a gRPC status
// for package status and for grpc-go. A call's error is always an *Error.
type Error struct {
	err error
	st  *status.Status
}

// Error returns the pipeline's message, which says how many attempts were
// made and why they stopped.
func (e *Error) Error() string { return e.err.Error() }

// Unwrap returns the pipeline's error.
func (e *Error) Unwrap() error { return e.err }

// GRPCStatus returns the call's status: the last answer's own (code,
// message and details) when the dependency answered and the call did not
// run out of time; DEADLINE_EXCEEDED when the time budget or the caller's
// deadline ran out; UNAVAILABLE when a breaker rejected the call or
// stopped its retries; CANCELED when the caller canceled (even between
// attempts); UNKNOWN otherwise.
func (e *Error) GRPCStatus() *status.Status { return e.st }

// callError wraps err, a pipeline's error, as the [Error] of a call.
func callError(err error) error {
	if err == nil {
		return nil
	}
	var answered interface{ GRPCStatus() *status.Status }
	var st *status.Status
	switch {
	case errors.Is(err, retrypolicy.ErrOutOfTime), errors.Is(err, context.DeadlineExceeded) && !errors.As(err, &answered):
		st = status.New(codes.DeadlineExceeded, err.Error())
	case breaker.IsRejection(err):
		st = status.New(codes.Unavailable, err.Error())
	case errors.Is(err, context.Canceled):
		st = status.New(codes.Canceled, err.Error())
	case errors.As(err, &answered) && answered.GRPCStatus() != nil:
		st = answered.GRPCStatus()
	default:
		st = status.New(codes.Unknown, err.Error())
	}
	return &Error{err: err, st: st}
}
