// Package grpcsignal is package retrysignal for gRPC: it stops retries
// multiplying through a chain of services by carrying, from hop to hop,
// which attempt a call is and whether its caller should retry, in gRPC's
// own metadata (gRFC A6).
//
// Outbound, every retry says how many attempts came before it in the
// [PreviousAttemptsKey] header (grpc-previous-rpc-attempts), which
// package grpcclient sends; the first attempt sends none. Inbound,
// [PreviousAttempts] reads it.
//
// Back, a server asks its client not to retry with a
// [PushbackKey] trailer (grpc-retry-pushback-ms) of -1: by gRFC A6 a
// negative or malformed pushback means "do not retry", which grpc-go's own
// retry policy honours as much as package grpcclient does. A service whose
// own outbound call failed after its resilient client had done what it
// could (retries, a quota, a breaker, its time budget) answers with
// [Error], which keeps the failure's meaning in the status code
// (UNAVAILABLE stays UNAVAILABLE) and adds the trailer; the interceptors
// [UnaryServerInterceptor] and [StreamServerInterceptor] do it for every
// such error a handler returns. A resilient client that gets the signal
// treats the answer as terminal for this call: not retried, still a
// breaker failure.
//
// A positive pushback is a hint of how long to wait before the next
// attempt, honoured up to the retry policy's longest delay.
package grpcsignal

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/grpc/internal/httpstatus"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/retrysignal"
)

// PreviousAttemptsKey is the request header (gRFC A6) that says how many
// attempts of the same call came before this one: "1" on the first retry.
// The first attempt sends none.
const PreviousAttemptsKey = "grpc-previous-rpc-attempts"

// PushbackKey is the trailer (gRFC A6) by which a server says how long
// its client should wait before retrying, in milliseconds, or with a
// negative value that it should not retry.
const PushbackKey = "grpc-retry-pushback-ms"

// PreviousAttempts returns how many attempts of the call came before the
// one whose incoming context ctx is, by its [PreviousAttemptsKey] header:
// 0 for a first attempt or a missing, repeated or malformed header.
func PreviousAttempts(ctx context.Context) int {
	vs := metadata.ValueFromIncomingContext(ctx, PreviousAttemptsKey)
	if len(vs) != 1 {
		return 0
	}
	n, err := strconv.Atoi(vs[0])
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// Pushback reads the [PushbackKey] values of a trailer: ok is false when
// there are none; otherwise retry reports whether the server allows a
// retry (one value, a whole number of milliseconds from 0 to 2^31-1) and
// d is the wait it asks for. A negative, malformed or repeated value
// allows no retry, as gRFC A6 says.
func Pushback(trailer metadata.MD) (d time.Duration, retry, ok bool) {
	vs := trailer[PushbackKey]
	if len(vs) == 0 {
		return 0, false, false
	}
	if len(vs) > 1 {
		return 0, false, true
	}
	ms, err := strconv.ParseInt(vs[0], 10, 32)
	if err != nil || ms < 0 {
		return 0, false, true
	}
	return time.Duration(ms) * time.Millisecond, true, true
}

// Code returns the code with which a service answers when its own
// outbound call failed with err, as a pipeline, package grpcclient or
// package httpclient returns it, keeping the failure's meaning: the
// dependency's own code when it answered over gRPC (UNAVAILABLE stays
// UNAVAILABLE, NOT_FOUND stays NOT_FOUND), also when the retries stopped
// because the next delay (a backoff or a pushback) would not fit in the
// time left, as grpcclient's error says; DEADLINE_EXCEEDED when the time
// budget ran out or the attempts timed out; UNAVAILABLE when the breaker
// is open or busy, or the retries or the retry quota ran out on errors
// without a gRPC status; CANCELED when the caller went away; UNKNOWN for
// another failure that a retry would not fix; INTERNAL when the request
// this service made was at fault.
func Code(err error) codes.Code {
	walked := resilience.Acyclic(err)
	return code(walked, answerOf(err, walked))
}

// answerOf returns the gRPC status in err's chain (the dependency's
// answer, as grpcclient's Error carries it), nil if none: err's own first,
// as grpc-go finds it, also in an error that wraps itself, and then in
// walked, resilience.Acyclic(err), whose chain ends (errors.As would walk
// err's for ever).
func answerOf(err, walked error) *status.Status {
	var answered interface{ GRPCStatus() *status.Status }
	if s, ok := err.(interface{ GRPCStatus() *status.Status }); ok {
		return s.GRPCStatus()
	}
	if errors.As(walked, &answered) {
		return answered.GRPCStatus()
	}
	return nil
}

// code is Code of err, whose tree ends, answered being its answerOf.
func code(err error, answered *status.Status) codes.Code {
	var answeredHTTP interface{ HTTPStatus() int } // httpclient's StatusError
	answeredInTime := answered != nil && answered.Code() != codes.DeadlineExceeded && answered.Code() != codes.Canceled
	switch {
	case err == nil:
		return codes.OK
	case errors.Is(err, retrypolicy.ErrOutOfTime) && !answeredInTime:
		return codes.DeadlineExceeded
	case breaker.IsRejection(err):
		return codes.Unavailable
	case answered != nil:
		return answered.Code()
	case errors.As(err, &answeredHTTP):
		return codeOf(answeredHTTP.HTTPStatus())
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded
	}
	switch resilience.Classify(err) {
	case resilience.ClassTerminal:
		return codes.Unknown
	case resilience.ClassPermanent:
		return codes.Internal
	case resilience.ClassCanceled:
		return codes.Canceled
	case resilience.ClassPending:
		return codes.Aborted
	default: // transient, given up on
		return codes.Unavailable
	}
}

// codeOf returns the code that stands for the status of an HTTP
// dependency's answer, keeping its meaning and its class: a 4xx the
// caller's fault or a conflict (permanent), 408, 429 and 5xx the
// dependency's.
func codeOf(status int) codes.Code {
	switch status {
	case http.StatusBadRequest:
		return codes.InvalidArgument
	case http.StatusUnauthorized:
		return codes.Unauthenticated
	case http.StatusForbidden:
		return codes.PermissionDenied
	case http.StatusNotFound, http.StatusGone:
		return codes.NotFound
	case http.StatusConflict:
		return codes.Aborted
	case http.StatusRequestedRangeNotSatisfiable:
		return codes.OutOfRange
	case http.StatusRequestTimeout, http.StatusGatewayTimeout:
		return codes.DeadlineExceeded
	case http.StatusTooManyRequests:
		return codes.ResourceExhausted
	case http.StatusNotImplemented:
		return codes.Unimplemented
	case http.StatusBadGateway, http.StatusServiceUnavailable:
		return codes.Unavailable
	}
	switch {
	case status >= 400 && status < 500:
		return codes.FailedPrecondition
	case status >= 500 && status < 600:
		return codes.Internal
	}
	return codes.Unknown // not a failure's status, or not one at all
}

// HTTPStatus returns the HTTP status that stands for c, as the
// google.rpc.Code mapping gives it: OK 200; INVALID_ARGUMENT,
// FAILED_PRECONDITION and OUT_OF_RANGE 400; UNAUTHENTICATED 401;
// PERMISSION_DENIED 403; NOT_FOUND 404; ALREADY_EXISTS and ABORTED 409;
// RESOURCE_EXHAUSTED 429; CANCELED 499; UNIMPLEMENTED 501; UNAVAILABLE
// 503; DEADLINE_EXCEEDED 504; the rest 500. A service that answers HTTP
// when its gRPC call failed gives it (grpcclient's Error does, to
// retrysignal.Status), so that the failure keeps its meaning and its
// class; package grpcidempotency stores it as a record's status, which
// idempotency.ReleaseStatus matches.
func HTTPStatus(c codes.Code) int { return httpstatus.Of(c) }

// NoRetryMessage is the status message of an [Error] answer: the
// dependency's own message is not passed on to this service's callers,
// but for an answer of its own that no one retries (see [Error]).
const NoRetryMessage = "a dependency failed after retrying; do not retry"

// Error returns the answer of a server handler whose outbound call failed
// with err: a status error with the code of [Code], and a [PushbackKey]
// trailer of -1 set on ctx, the handler's context (the caller must not
// retry: this service's resilient client already did what retrying it
// would). Where err ends with the dependency's own answer of a permanent
// class (a gRPC status such as FAILED_PRECONDITION or NOT_FOUND, which
// no one retries), that status is the answer, its message and details
// (a google.rpc.ErrorInfo, a BadRequest's field violations) as the
// dependency gave them, as a plain client would pass them on; else the
// message is [NoRetryMessage]. It returns nil for a nil err.
func Error(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	_ = grpc.SetTrailer(ctx, metadata.Pairs(PushbackKey, "-1")) // fails only outside a handler
	walked := resilience.Acyclic(err)
	answered := answerOf(err, walked)
	c := code(walked, answered)
	if class, ok := resilience.ClassOf(walked); ok && class == resilience.ClassPermanent && answered != nil && answered.Code() == c {
		return answered.Err() // as the dependency gave it, not as wrapped on the way
	}
	return status.Error(c, NoRetryMessage)
}

// UnaryServerInterceptor answers, by [Error], every error of a unary
// handler that says the layer below did what retrying it would
// (retrysignal.Retried); other errors, such as the handler's own status
// errors, or one attempt nobody retried, pass as they are. A handler that
// makes an error of its own of a resilient call's failure (an SDK over
// httpclient's Transport) marks it: resilience.Terminal(err). A pushback
// the handler set itself stays: gRPC takes no trailer back, so a handler
// that passes its dependency's trailers on leaves [PushbackKey] out, or
// its callers will not retry what nobody below did (retrysignal.Handler
// drops a copied No-Retry). It is safe for concurrent use.
func UnaryServerInterceptor(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	if err != nil && retrysignal.Retried(err) {
		return nil, Error(ctx, err)
	}
	return resp, err
}

// StreamServerInterceptor is [UnaryServerInterceptor] for streaming
// handlers. It is safe for concurrent use.
func StreamServerInterceptor(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	err := handler(srv, ss)
	if err != nil && retrysignal.Retried(err) {
		return Error(ss.Context(), err)
	}
	return err
}
