// Package grpcidempotency makes retried gRPC calls safe on the server
// side: a unary call that carries an idempotency key in its
// [idempotencykey.MetadataKey] header runs at most once per key, and a
// repeat gets the first call's answer replayed, as package idempotency
// does for HTTP writes, and on the same core: [UnaryServerInterceptor]
// runs each keyed call under an idempotency.Guard, so the lease renewed
// while the handler runs, the fencing token, the scope per caller, the
// stores (memory, Redis, SQL) and what each survives are the same.
//
// The first call with a key runs the handler; its answer is stored under
// the key: the response message (marshaled, with its type's full name),
// or the status (code, message and details), and the header and trailer
// metadata the handler set. A repeat with the same key and the same
// request (method and marshaled message, fingerprinted) gets it back,
// marked by an idempotent-replayed: true header, without running the
// handler. An answer that cannot be kept (a response that cannot be
// marshaled, or a handler that returned neither a response nor an error)
// is stored as incomplete: the call is not run again, since the handler
// may have committed, and a repeat gets INTERNAL "response incomplete".
// A keyed call whose [Scope] returns "" is refused with UNAUTHENTICATED.
// A repeat that arrives while the first still runs gets ABORTED
// (HTTP's 409) with a pushback of a second, which package grpcclient
// retries after; one with another request gets FAILED_PRECONDITION (HTTP's
// 422); a malformed key, or a request that is not a protocol buffer
// message (a JSON or FlatBuffers codec: the fingerprint and the record
// are of proto messages, and the call is not served without the guard it
// asked for), INVALID_ARGUMENT; a store that fails, UNAVAILABLE
// with a pushback of a second, until it has failed for the Guard's
// idempotency.FailOpenAfter: then calls run on the process's own records.
//
// As over HTTP, an answer that tells the client to retry because the call
// was not processed is not stored, and the key is freed: the codes that
// map to HTTP 429, 502, 503 and 504 (RESOURCE_EXHAUSTED, UNAVAILABLE,
// DEADLINE_EXCEEDED; see grpcsignal.HTTPStatus and idempotency.ReleaseStatus),
// CANCELED, ABORTED (gRPC's "retry at a higher level": the call did not
// take effect, as a lower hop's "in progress" that the handler passes
// on), and a handler that panicked. A handler's error that is not a
// status is read as grpc-go's server answers it: a context's error,
// wrapped or not, is CANCELED or DEADLINE_EXCEEDED, and frees the key; a
// handler that may have taken effect before its context ended (a
// database driver's commit that failed with a deadline is ambiguous)
// answers a status of its own, such as INTERNAL, to keep the key.
//
// A store that fails as the handler ends holds the answer up for one
// StoreTimeout (two for an answer that frees the key, as a renewal in
// flight is waited for): the save is then retried after the answer has
// gone, on a goroutine of its own (idempotency.Claim.CompleteLater),
// which a GracefulStop does not wait for.
//
// With package grpcsignal's interceptor, put this one outside it (before
// it in grpc.ChainUnaryInterceptor's list), so that what is stored and
// replayed is what the client was answered, the signal included.
//
// A keyed call's handler runs with a stream of this package's in its
// context, which records the metadata the handler sets: grpc-go's
// grpc.SetSendCompressor and grpc.ClientSupportedCompressors, which look
// for grpc-go's own stream type, fail there (the response is compressed
// as the request was, as without them). An interceptor chained before
// this one can call them for every call. What is recorded is what the
// handler answered with the metadata grpc-go took from it: metadata that
// grpc-go refuses (a header set after the header went) is not recorded;
// metadata it takes but that the wire cannot carry (a name in upper case
// set in a metadata.MD by hand) fails the first call after the handler
// ran, and a repeat gets the handler's answer, its names as gRPC has them.
//
// Only unary calls are covered; streams pass through.
package grpcidempotency

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/idempotencykey"
)

// ReplayedKey is the response header set to "true" on a replayed answer.
const ReplayedKey = "idempotent-replayed"

// UnaryServerInterceptor returns an interceptor that runs each unary call
// with a key in its [idempotencykey.MetadataKey] header at most once per
// key on guard (see the package documentation). The guard's options
// (idempotency.TTL, Lease, StoreTimeout, MaxResponse of the marshaled
// answer, ReleaseStatus by grpcsignal.HTTPStatus, WithListener and WithLogger) work
// as over HTTP; the middleware's (idempotency.Required, Scope, SharedKeys,
// MaxBody) are refused by idempotency.NewGuard: this package's [Required],
// [Scope], [SharedKeys] and [MaxRequest] are given here, in opts. A nil
// guard means one on an idempotency.MemoryStore of default size, with the
// default options. It panics unless given [Scope] or [SharedKeys]. It is
// safe for concurrent use.
func UnaryServerInterceptor(guard *idempotency.Guard, opts ...Option) grpc.UnaryServerInterceptor {
	if guard == nil {
		guard = idempotency.NewGuard(nil)
	}
	cfg := newConfig(opts)
	if cfg.scope == nil {
		panic("grpcidempotency: UnaryServerInterceptor: give Scope (keys per caller, by identity) or SharedKeys (one namespace): no default, so that callers are neither silently shared nor split")
	}
	var types sync.Map // message full name -> protoreflect.MessageType, of answers seen
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		key, err := cfg.key(ctx)
		if err != nil {
			return nil, err
		}
		if key == "" {
			return handler(ctx, req)
		}
		body, err := cfg.payload(req)
		if err != nil {
			return nil, err
		}
		scope := cfg.scope(ctx)
		if scope == "" && !cfg.shared {
			return nil, grpcstatus.Error(codes.Unauthenticated, "grpcidempotency: no caller identity: the Scope function returned none for this call, so its idempotency key has no namespace of its own (keys are shared only with SharedKeys)")
		}
		claim, stored, err := guard.Begin(ctx, scope, key, fingerprint(info.FullMethod, body))
		switch {
		case err != nil:
			return nil, refusal(ctx, err)
		case stored != nil:
			return replay(ctx, stored, &types)
		}
		return run(ctx, claim, req, handler, &types)
	}
}

// run runs the handler under claim and stores its answer.
func run(ctx context.Context, claim *idempotency.Claim, req any, handler grpc.UnaryHandler, types *sync.Map) (any, error) {
	defer claim.Release(ctx) // after a panic or runtime.Goexit; nothing after Complete
	sts := &capture{ServerTransportStream: grpc.ServerTransportStreamFromContext(ctx)}
	resp, err := handler(grpc.NewContextWithServerTransportStream(claim.Context(), sts), req)
	claim.CompleteLater(ctx, record(claim, sts, resp, err, types)) // a failure is reported
	return resp, err
}

// key returns the call's idempotency key, "" for a call without one that
// may pass, or the status error of a call refused for its key.
func (c *config) key(ctx context.Context) (string, error) {
	values := metadata.ValueFromIncomingContext(ctx, idempotencykey.MetadataKey)
	if len(values) == 0 {
		if c.required {
			return "", invalid("missing idempotency key: this request requires an Idempotency-Key header")
		}
		return "", nil
	}
	key, err := idempotencykey.Parse(values[0])
	if err != nil || len(values) > 1 {
		return "", invalid("invalid idempotency key: the Idempotency-Key header must be one string of 1 to 255 printable characters")
	}
	return key, nil
}

// payload returns the marshaled request, or the status error of a request
// that cannot be fingerprinted.
func (c *config) payload(req any) ([]byte, error) {
	pm, ok := req.(proto.Message)
	if !ok {
		return nil, invalid("unreadable body: the request is not a protocol buffer message")
	}
	body, err := proto.MarshalOptions{Deterministic: true}.Marshal(pm)
	if err != nil {
		return nil, invalid("unreadable body: " + err.Error())
	}
	if len(body) > c.maxRequest {
		return nil, invalid("request body too large: the body is too large to be protected by an idempotency key")
	}
	return body, nil
}

// invalid returns the status error of a call refused for its key or its
// request.
func invalid(msg string) error {
	return grpcstatus.Error(codes.InvalidArgument, "grpcidempotency: "+msg)
}

// fingerprint identifies a call's request: its full method and marshaled
// message, hashed as package idempotency hashes an HTTP POST of the
// message to the method's path (method, path, query and body), so that
// the records of the earlier versions, which ran calls through its
// middleware, still match.
func fingerprint(method string, body []byte) string {
	s := sha256.New()
	io.WriteString(s, "POST\x00"+method+"\x00\x00")
	s.Write(body)
	return hex.EncodeToString(s.Sum(nil))
}

// refusal returns the status error of a call whose key the guard refused,
// with a pushback of a second for one that may go through later.
func refusal(ctx context.Context, err error) error {
	code, msg := codes.Unavailable, "idempotency store unavailable"
	switch {
	case errors.Is(err, idempotency.ErrFull):
		msg = "too many requests in flight: the idempotency store has no room for another request"
	case errors.Is(err, idempotency.ErrKeyReused):
		code, msg = codes.FailedPrecondition, "idempotency key reused: this key was used for a different request"
	case errors.Is(err, idempotency.ErrInProgress):
		code, msg = codes.Aborted, "request in progress: a request with this key is still being processed"
	case errors.Is(err, idempotency.ErrNotReplayable):
		code, msg = codes.Internal, "response not replayable: the response to this key was too large to store"
	case errors.Is(err, idempotency.ErrIncomplete):
		code, msg = codes.Internal, "response incomplete: the call with this key ran, but its answer could not be kept: it is not replayed, and not run again"
	}
	if code == codes.Aborted || code == codes.Unavailable {
		_ = grpc.SetTrailer(ctx, metadata.Pairs("grpc-retry-pushback-ms", "1000"))
	}
	return grpcstatus.Error(code, "grpcidempotency: "+msg)
}
