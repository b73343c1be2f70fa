// Package grpcidempotency makes retried gRPC calls safe on the server
// side: a unary call that carries an idempotency key in its
// [MetadataKey] header runs at most once per key, and a repeat gets the
// first call's answer replayed, as package idempotency does for HTTP
// writes, and by its very code: [UnaryServerInterceptor] runs each call
// through idempotency.Middleware, so the lease renewed while the handler
// runs, the fencing token, the scope per caller, the stores (memory,
// Redis, SQL) and what each survives are the same.
//
// The first call with a key runs the handler; its answer is stored under
// the key: the response message (marshaled, with its type's full name),
// or the status (code, message and details), and the header and trailer
// metadata the handler set. A repeat with the same key and the same
// request (method and marshaled message, fingerprinted) gets it back,
// marked by an idempotent-replayed: true header, without running the
// handler. A repeat that arrives while the first still runs gets ABORTED
// (HTTP's 409) with a pushback of a second, which package grpcclient
// retries after; one with another request gets FAILED_PRECONDITION (HTTP's
// 422); a malformed key, INVALID_ARGUMENT; a store that fails, UNAVAILABLE
// with a pushback of a second.
//
// As over HTTP, an answer that tells the client to retry because the call
// was not processed is not stored, and the key is freed: the codes that
// map to HTTP 429, 502, 503 and 504 (RESOURCE_EXHAUSTED, UNAVAILABLE,
// DEADLINE_EXCEEDED; see [HTTPStatus]), CANCELED, and a handler that
// panicked.
//
// Only unary calls are covered; streams pass through.
package grpcidempotency

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/resiliencekit/resiliencekit/idempotency"
)

// MetadataKey is the request header that carries an idempotency key: the
// Idempotency-Key header of package idempotency, in gRPC's lower case.
const MetadataKey = "idempotency-key"

// ReplayedKey is the response header set to "true" on a replayed answer.
const ReplayedKey = "idempotent-replayed"

// The names under which a record keeps a gRPC answer, in its Header.
const (
	codeHeader    = "Grpc-Status-Code"
	typeHeader    = "Grpc-Message-Type"
	headerPrefix  = "Grpc-Header-"
	trailerPrefix = "Grpc-Trailer-"
)

// UnaryServerInterceptor returns an interceptor that runs each unary call
// through idempotency.Middleware(store, opts...): a call with a key in its
// [MetadataKey] header runs at most once per key (see the package
// documentation). Of the middleware's options, Required makes a key
// mandatory on every unary method; TTL, Lease, StoreTimeout, MaxBody (of
// the marshaled request), MaxResponse (of the marshaled answer),
// ReleaseStatus (by [HTTPStatus]), SharedKeys, WithListener and
// WithLogger work as over HTTP; Scope's request has the call's metadata as
// its Header (so the default scope is the authorization header) and its
// full method name as its URL's path. A nil store means an
// idempotency.MemoryStore of default size. It is safe for concurrent use.
func UnaryServerInterceptor(store idempotency.Store, opts ...idempotency.Option) grpc.UnaryServerInterceptor {
	mw := idempotency.Middleware(store, opts...)
	var types sync.Map // message full name -> protoreflect.MessageType, of answers seen
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		r, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://grpc"+info.FullMethod, &lazyBody{msg: req})
		if err != nil {
			return nil, grpcstatus.Error(codes.Internal, "grpcidempotency: "+err.Error())
		}
		for k, vs := range md {
			if !strings.HasSuffix(k, "-bin") && !strings.HasPrefix(k, ":") {
				for _, v := range vs {
					r.Header.Add(k, v)
				}
			}
		}
		var run struct {
			ran  bool
			resp any
			err  error
		}
		rec := &recorder{header: http.Header{}}
		mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			run.ran = true
			run.resp, run.err = serve(r.Context(), w, req, handler, &types)
		})).ServeHTTP(rec, r)
		if run.ran {
			return run.resp, run.err
		}
		return replay(ctx, rec, &types)
	}
}

// serve runs the handler and writes its answer to w, for the record.
func serve(ctx context.Context, w http.ResponseWriter, req any, handler grpc.UnaryHandler, types *sync.Map) (any, error) {
	sts := &capture{ServerTransportStream: grpc.ServerTransportStreamFromContext(ctx)}
	resp, err := handler(grpc.NewContextWithServerTransportStream(ctx, sts), req)
	h := w.Header()
	sts.mu.Lock()
	for k, vs := range sts.header {
		h[headerPrefix+k] = storable(k, vs)
	}
	for k, vs := range sts.trailer {
		h[trailerPrefix+k] = storable(k, vs)
	}
	sts.mu.Unlock()
	if err != nil {
		st := grpcstatus.Convert(err)
		if st.Code() == codes.Canceled {
			if c := idempotency.FromContext(ctx); c != nil {
				c.Abandon() // the handler stopped for its caller: nothing committed
			}
		}
		body, _ := proto.Marshal(st.Proto())
		h.Set(codeHeader, strconv.Itoa(int(st.Code())))
		w.WriteHeader(HTTPStatus(st.Code()))
		_, _ = w.Write(body)
		return resp, err
	}
	pm, ok := resp.(proto.Message)
	var body []byte
	if ok {
		body, err = proto.MarshalOptions{Deterministic: true}.Marshal(pm)
	}
	if !ok || err != nil {
		if c := idempotency.FromContext(ctx); c != nil {
			c.Abandon() // cannot be stored, so cannot be replayed: run it again
		}
		w.WriteHeader(http.StatusInternalServerError)
		return resp, nil
	}
	mt := pm.ProtoReflect().Type()
	name := string(mt.Descriptor().FullName())
	types.LoadOrStore(name, mt)
	h.Set(typeHeader, name)
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
	return resp, nil
}

// replay returns the answer the middleware wrote without running the
// handler: a stored one, or its own refusal.
func replay(ctx context.Context, rec *recorder, types *sync.Map) (any, error) {
	code, isStatus := rec.header[codeHeader]
	name, isMessage := rec.header[typeHeader]
	if !isStatus && !isMessage {
		return nil, refusal(ctx, rec)
	}
	header, trailer := metadata.MD{}, metadata.MD{}
	for k, vs := range rec.header {
		if n, ok := strings.CutPrefix(k, headerPrefix); ok {
			n = strings.ToLower(n)
			header[n] = stored(n, vs)
		} else if n, ok := strings.CutPrefix(k, trailerPrefix); ok {
			n = strings.ToLower(n)
			trailer[n] = stored(n, vs)
		}
	}
	header.Set(ReplayedKey, "true")
	_ = grpc.SetHeader(ctx, header)
	if len(trailer) > 0 {
		_ = grpc.SetTrailer(ctx, trailer)
	}
	if isStatus {
		st := new(status.Status)
		if err := proto.Unmarshal(rec.body.Bytes(), st); err != nil || len(code) != 1 {
			return nil, grpcstatus.Error(codes.Internal, "grpcidempotency: stored status unreadable")
		}
		return nil, grpcstatus.ErrorProto(st)
	}
	mt := messageType(name[0], types)
	if mt == nil {
		return nil, grpcstatus.Errorf(codes.Internal, "grpcidempotency: stored answer of unknown type %s", name[0])
	}
	m := mt.New().Interface()
	if err := proto.Unmarshal(rec.body.Bytes(), m); err != nil {
		return nil, grpcstatus.Error(codes.Internal, "grpcidempotency: stored answer unreadable")
	}
	return m, nil
}

// storable returns the values of the metadata key k as a record keeps
// them: a binary key's (k ends in "-bin") base64-encoded, since a store
// may keep only text (the Redis and SQL stores keep JSON).
func storable(k string, vs []string) []string {
	if !strings.HasSuffix(k, "-bin") {
		return vs
	}
	enc := make([]string, len(vs))
	for i, v := range vs {
		enc[i] = base64.StdEncoding.EncodeToString([]byte(v))
	}
	return enc
}

// stored undoes storable.
func stored(k string, vs []string) []string {
	if !strings.HasSuffix(k, "-bin") {
		return vs
	}
	dec := make([]string, 0, len(vs))
	for _, v := range vs {
		if b, err := base64.StdEncoding.DecodeString(v); err == nil {
			dec = append(dec, string(b))
		}
	}
	return dec
}

// messageType finds the message type named name: one seen in an answer,
// a registered Go type, or a dynamic one from a registered descriptor.
func messageType(name string, types *sync.Map) protoreflect.MessageType {
	if mt, ok := types.Load(name); ok {
		return mt.(protoreflect.MessageType)
	}
	if mt, err := protoregistry.GlobalTypes.FindMessageByName(protoreflect.FullName(name)); err == nil {
		return mt
	}
	if d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(name)); err == nil {
		if md, ok := d.(protoreflect.MessageDescriptor); ok {
			return dynamicpb.NewMessageType(md)
		}
	}
	return nil
}

// refusal turns an answer of the middleware's own into a status error.
func refusal(ctx context.Context, rec *recorder) error {
	var problem struct{ Title, Detail string }
	_ = json.Unmarshal(rec.body.Bytes(), &problem)
	msg := "grpcidempotency: " + problem.Title
	if problem.Detail != "" {
		msg += ": " + problem.Detail
	}
	code := codes.Unknown
	switch rec.status {
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
		code = codes.InvalidArgument
	case http.StatusConflict:
		code = codes.Aborted
	case http.StatusUnprocessableEntity:
		code = codes.FailedPrecondition
	case http.StatusServiceUnavailable:
		code = codes.Unavailable
	case http.StatusInternalServerError:
		code = codes.Internal
	}
	// In progress, or a store failing: the middleware says when to try again.
	if s, err := strconv.Atoi(rec.header.Get("Retry-After")); err == nil && (code == codes.Aborted || code == codes.Unavailable) {
		_ = grpc.SetTrailer(ctx, metadata.Pairs("grpc-retry-pushback-ms", strconv.Itoa(s*1000)))
	}
	return grpcstatus.Error(code, msg)
}

// HTTPStatus returns the HTTP status that a gRPC code stands for in a
// record, as google.rpc.Code documents the mapping: the status that
// idempotency.ReleaseStatus matches. OK is 200, INVALID_ARGUMENT,
// FAILED_PRECONDITION and OUT_OF_RANGE 400, UNAUTHENTICATED 401,
// PERMISSION_DENIED 403, NOT_FOUND 404, ALREADY_EXISTS and ABORTED 409,
// RESOURCE_EXHAUSTED 429, CANCELED 499, UNIMPLEMENTED 501, UNAVAILABLE
// 503, DEADLINE_EXCEEDED 504, and the rest 500.
func HTTPStatus(c codes.Code) int {
	switch c {
	case codes.OK:
		return http.StatusOK
	case codes.InvalidArgument, codes.FailedPrecondition, codes.OutOfRange:
		return http.StatusBadRequest
	case codes.Unauthenticated:
		return http.StatusUnauthorized
	case codes.PermissionDenied:
		return http.StatusForbidden
	case codes.NotFound:
		return http.StatusNotFound
	case codes.AlreadyExists, codes.Aborted:
		return http.StatusConflict
	case codes.ResourceExhausted:
		return http.StatusTooManyRequests
	case codes.Canceled:
		return 499
	case codes.Unimplemented:
		return http.StatusNotImplemented
	case codes.Unavailable:
		return http.StatusServiceUnavailable
	case codes.DeadlineExceeded:
		return http.StatusGatewayTimeout
	}
	return http.StatusInternalServerError
}

// lazyBody is a request's marshaled message, marshaled when first read:
// the middleware reads it only for a call with a key.
type lazyBody struct {
	msg any
	r   *bytes.Reader
}

func (b *lazyBody) Read(p []byte) (int, error) {
	if b.r == nil {
		pm, ok := b.msg.(proto.Message)
		if !ok {
			return 0, io.ErrUnexpectedEOF // not a proto message: cannot be fingerprinted
		}
		body, err := proto.MarshalOptions{Deterministic: true}.Marshal(pm)
		if err != nil {
			return 0, err
		}
		b.r = bytes.NewReader(body)
	}
	return b.r.Read(p)
}

// recorder is the http.ResponseWriter the middleware answers into.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
}

func (r *recorder) Write(p []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	return r.body.Write(p)
}

// capture passes a handler's header and trailer metadata on to grpc-go,
// keeping a copy for the record.
type capture struct {
	grpc.ServerTransportStream // nil outside a gRPC server
	mu                         sync.Mutex
	header, trailer            metadata.MD
}

func (c *capture) Method() string {
	if c.ServerTransportStream == nil {
		return ""
	}
	return c.ServerTransportStream.Method()
}

func (c *capture) keep(to *metadata.MD, md metadata.MD) {
	c.mu.Lock()
	*to = metadata.Join(*to, md)
	c.mu.Unlock()
}

func (c *capture) SetHeader(md metadata.MD) error {
	c.keep(&c.header, md)
	if c.ServerTransportStream == nil {
		return nil
	}
	return c.ServerTransportStream.SetHeader(md)
}

func (c *capture) SendHeader(md metadata.MD) error {
	c.keep(&c.header, md)
	if c.ServerTransportStream == nil {
		return nil
	}
	return c.ServerTransportStream.SendHeader(md)
}

func (c *capture) SetTrailer(md metadata.MD) error {
	c.keep(&c.trailer, md)
	if c.ServerTransportStream == nil {
		return nil
	}
	return c.ServerTransportStream.SetTrailer(md)
}
