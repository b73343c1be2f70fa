package grpcclient

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/grpc/grpcsignal"
	"github.com/resiliencekit/resiliencekit/pipeline"
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

// endedBy returns the cause of the end of ctx, an attempt's, when err,
// the attempt's error, is the DEADLINE_EXCEEDED that its end makes
// (grpc-go's, which says nothing of whose deadline it was); else nil.
func endedBy(ctx context.Context, err error) error {
	if err == nil || status.Code(err) != codes.DeadlineExceeded {
		return nil
	}
	if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < 10*time.Millisecond {
		// grpc-go's own timer may end the call a moment before the
		// context's ends it: wait for the context, which is due.
		<-ctx.Done()
	}
	if ctx.Err() == nil {
		return nil
	}
	return context.Cause(ctx)
}

// timedOut names the pipeline's attempt timeout in err, the error of an
// attempt whose context it ended, so that err matches
// pipeline.ErrAttemptTimeout as over HTTP.
func timedOut(ctx context.Context, err error) error {
	if endedBy(ctx, err) == pipeline.ErrAttemptTimeout {
		return fmt.Errorf("%w: %w", pipeline.ErrAttemptTimeout, err)
	}
	return err
}

// classify returns err, the error of one attempt whose trailer is
// trailer, marked with its class: that of its status code, made terminal
// by a pushback that forbids a retry, and with a pushback's delay as a
// retry-after hint; ABORTED (permanent by default) is transient with a
// pushback that allows a retry; rejected for an error that the dependency
// did not cause ([localStatus]), told by what the attempt was made of
// (at); permanent for a message that one side could not decode
// ([undecodable]). An error without a status is left to
// resilience.Classify.
func (c *config) classify(err error, trailer metadata.MD, at attemptOf) error {
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	if localStatus(st, at) {
		return &attemptError{err: err, st: st, class: resilience.ClassRejected}
	}
	if undecodable(st) {
		return &attemptError{err: err, st: st, class: resilience.ClassPermanent}
	}
	class := resilience.ClassTerminal // a code from beyond the standard: as UNKNOWN
	if code := st.Code(); code <= maxCode {
		class = c.classes[code]
	}
	e := &attemptError{err: err, st: st, class: class}
	if st.Code() == codes.Aborted && class == resilience.ClassPermanent {
		// ABORTED with a pushback says "try again later": a repeat of a
		// keyed call still running (package grpcidempotency), no failure
		// of the dependency's.
		if d, retry, ok := grpcsignal.Pushback(trailer); ok && retry {
			e.class = resilience.ClassPending
			return resilience.RetryAfter(e, d)
		}
	}
	if class != resilience.ClassTransient && class != resilience.ClassTerminal && class != resilience.ClassPending {
		return e
	}
	d, retry, ok := grpcsignal.Pushback(trailer)
	switch {
	case !ok:
		return e
	case !retry:
		e.class = resilience.ClassTerminal // asked not to retry: not here
		return e
	case class.Retryable():
		return resilience.RetryAfter(e, d)
	}
	return e
}

// undecodable reports whether st is grpc-go's INTERNAL for a message that
// did not unmarshal: a request that the server could not decode (the
// caller sent another type, or the two sides' schemas drifted apart), or
// a reply that the client could not. The server answered, healthy: like
// an INVALID_ARGUMENT, a retry would meet it again, and a breaker that
// counted it would reject the calls of the methods that work.
func undecodable(st *status.Status) bool {
	return st.Code() == codes.Internal && strings.HasPrefix(st.Message(), "grpc: failed to unmarshal the received message: ")
}

// messageSizeLimits start the messages of grpc-go's errors for a message
// over a size limit (MaxCallSendMsgSize, MaxCallRecvMsgSize and the
// server's own), whichever side made them.
var messageSizeLimits = []string{
	"trying to send message larger than max",
	"grpc: trying to send message larger than max",
	"grpc: received message larger than max",
	"grpc: received message after decompression larger than max",
	"grpc: message after decompression larger than max",
}

// attemptOf is what an attempt was made of, against which its error is
// checked: a server can answer in the words of an error grpc-go makes on
// the client (a server returning the error of its own call upstream), and
// only what the call holds tells which it was.
type attemptOf struct {
	req, reply any               // nil for a stream
	opts       []grpc.CallOption // the call's, which name the codec of req
	reached    bool              // the attempt had a stream to a server (grpc.Peer): what grpc-go refuses before, the server never saw
}

// localStatus reports whether st, the status of an attempt, is an error
// that the dependency did not cause, made on the client's side before or
// after the exchange, which a retry would meet again and which says
// nothing of the dependency's health: neither retried nor counted
// (resilience.ClassRejected). grpc-go gives such errors no type, only a
// status made on the client, told apart by its message, and checked
// against what the attempt was made of where a server could answer in the
// same words:
//
//   - RESOURCE_EXHAUSTED for a message over a size limit: a request over
//     the client's MaxCallSendMsgSize (never sent), a response over its
//     MaxCallRecvMsgSize (the server's work is thrown away, and would be
//     on every retry); the same messages from the server (the request over
//     its limit) are the caller's too. A RESOURCE_EXHAUSTED of the server's
//     own, such as a quota, stays transient.
//   - INTERNAL "grpc: error while marshaling" of a request that does not
//     marshal (a proto3 string that is not UTF-8, or no proto message at
//     all): checked by marshaling req again, with the codec the call's
//     options choose ([marshals]).
//   - INTERNAL of the caller's own making before anything is sent, when
//     the attempt never had a stream to a server: invalid outgoing
//     metadata, or more of it than the server's header list limit, a
//     compressor or content-subtype that is not registered, call
//     credentials that fail; and a reply of a Go type the codec does not
//     take (checked).
//   - UNAVAILABLE for a server certificate that the client does not trust
//     (TLS verification), and, when the attempt never had a stream, for
//     an authority of the caller's (grpc.CallAuthority) that the
//     connection's credentials do not vouch for.
func localStatus(st *status.Status, at attemptOf) bool {
	msg := st.Message()
	switch st.Code() {
	case codes.ResourceExhausted:
		for _, m := range messageSizeLimits {
			if strings.HasPrefix(msg, m) {
				return true
			}
		}
	case codes.Internal:
		return localInternal(msg, at)
	case codes.Unavailable:
		// grpc-go's own words for a connection whose TLS handshake failed,
		// which a server does not send; and for an authority the caller
		// set (grpc.CallAuthority) that the connection's credentials do
		// not vouch for, refused before the stream.
		return strings.HasPrefix(msg, "connection error: desc = \"transport: authentication handshake failed: ") &&
			(strings.Contains(msg, "tls: failed to verify certificate") || strings.Contains(msg, "x509: ")) ||
			!at.reached && (strings.HasPrefix(msg, "failed to validate authority ") ||
				strings.Contains(msg, "does not implement the AuthorityValidator interface, but authority override specified with CallAuthority"))
	}
	return false
}

// localInternal reports whether msg, an INTERNAL status's, is grpc-go's
// refusal of something at holds.
func localInternal(msg string, at attemptOf) bool {
	switch {
	case strings.HasPrefix(msg, "grpc: error while marshaling"):
		return at.req != nil && !marshals(at.req, at.opts)
	case strings.HasPrefix(msg, "header key "), strings.HasPrefix(msg, "there is an empty key in the header"),
		strings.HasPrefix(msg, "grpc: Compressor is not installed"), strings.HasPrefix(msg, "no codec registered for content-subtype"),
		strings.HasPrefix(msg, "transport: per-RPC creds failed"), strings.HasPrefix(msg, "header list size to send violates the maximum size"):
		return !at.reached
	case strings.HasPrefix(msg, "grpc: failed to unmarshal the received message: failed to unmarshal, message is "):
		_, ok := at.reply.(proto.Message)
		return at.reply != nil && !ok
	}
	return false
}

// marshals reports whether v marshals with the codec that grpc-go uses for
// a call with opts, the connection's default call options among them: the
// last one forced (grpc.ForceCodec, grpc.ForceCodecV2), else the
// content-subtype's (grpc.CallContentSubtype), else proto's. It reports
// true for a codec it cannot find, whose errors are not of marshaling.
func marshals(v any, opts []grpc.CallOption) bool {
	var codec any
	subtype := ""
	for _, o := range opts {
		switch o := o.(type) {
		case grpc.ForceCodecV2CallOption:
			codec = o.CodecV2
		case grpc.ForceCodecCallOption:
			codec = o.Codec
		case grpc.CustomCodecCallOption: //nolint:staticcheck // still honoured by grpc-go
			codec = o.Codec
		case grpc.ContentSubtypeCallOption:
			subtype = o.ContentSubtype
		}
	}
	if codec == nil {
		if subtype == "" {
			subtype = "proto"
		}
		if c := encoding.GetCodec(subtype); c != nil {
			codec = c
		} else if c := encoding.GetCodecV2(subtype); c != nil {
			codec = c
		}
	}
	switch c := codec.(type) {
	case encoding.CodecV2:
		b, err := c.Marshal(v)
		b.Free()
		return err == nil
	case interface{ Marshal(any) ([]byte, error) }: // encoding.Codec, grpc.Codec
		_, err := c.Marshal(v)
		return err == nil
	}
	return true
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
// message and details) when the dependency answered, also when the
// retries stopped because the next delay (a backoff or the server's
// pushback) would not fit in the time left (the error still matches
// retrypolicy.ErrOutOfTime); DEADLINE_EXCEEDED when the time budget or
// the caller's deadline ran out; UNAVAILABLE when a breaker rejected the call or
// stopped its retries; CANCELED when the caller canceled (even between
// attempts); UNKNOWN otherwise.
func (e *Error) GRPCStatus() *status.Status { return e.st }

// HTTPStatus returns the HTTP status that stands for the call's code
// ([grpcsignal.HTTPStatus]): what retrysignal.Status answers with for a
// service that answers HTTP when its gRPC call failed, so that a
// dependency's NOT_FOUND is a 404 to its caller, not a 500 its breaker
// counts. Two are this call's own: a CANCELED (the caller went away, or a
// proxy reset the stream) is a 503, not the caller's fault (499); and an
// error made on this side before anything was sent (class rejected, such
// as a message over MaxCallSendMsgSize) a 500, the request this service
// made being at fault, but a refusal of the pipeline's own stages
// (UNAVAILABLE: the breaker, the limit, the throttle) a 503.
func (e *Error) HTTPStatus() int {
	c := e.st.Code()
	switch {
	case c == codes.Canceled:
		return http.StatusServiceUnavailable
	case c != codes.Unavailable && resilience.Classify(e.err) == resilience.ClassRejected:
		return http.StatusInternalServerError
	}
	return grpcsignal.HTTPStatus(c)
}

// answeredInTime reports whether the last attempt of a call that ran out
// of time got an answer from the dependency, other than its own
// DEADLINE_EXCEEDED or CANCELED, before the deadline: the retries stopped
// because the next delay (a backoff, or a pushback) would have ended past
// the deadline, not because it had passed. The call then ends at once
// with that answer, its status and its class, not with a DEADLINE_EXCEEDED
// that would come before the deadline and that an upstream client would
// retry.
func answeredInTime(err error) bool {
	var answered interface{ GRPCStatus() *status.Status }
	if !errors.As(err, &answered) || answered.GRPCStatus() == nil {
		return false
	}
	switch answered.GRPCStatus().Code() {
	case codes.DeadlineExceeded, codes.Canceled:
		return false
	}
	return true
}

// callError wraps err, a pipeline's error, as the [Error] of a call.
func callError(err error) error {
	if err == nil {
		return nil
	}
	var answered interface{ GRPCStatus() *status.Status }
	var st *status.Status
	switch {
	case errors.Is(err, retrypolicy.ErrOutOfTime) && !answeredInTime(err), errors.Is(err, context.DeadlineExceeded) && !errors.As(err, &answered):
		st = status.New(codes.DeadlineExceeded, err.Error())
	case breaker.IsRejection(err):
		st = status.New(codes.Unavailable, err.Error())
	case errors.Is(err, context.Canceled):
		st = status.New(codes.Canceled, err.Error())
	case errors.As(err, &answered) && answered.GRPCStatus() != nil:
		st = answered.GRPCStatus()
	case resilience.Classify(err) == resilience.ClassRejected: // the pipeline's own refusal: a limit, a throttle
		st = status.New(codes.Unavailable, err.Error())
	default:
		st = status.New(codes.Unknown, err.Error())
	}
	return &Error{err: err, st: st}
}
