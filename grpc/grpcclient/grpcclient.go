// Package grpcclient makes outbound gRPC calls resilient: client
// interceptors that run every unary call and every stream through a
// pipeline (a time budget, a circuit breaker, a jittered retry), as
// package httpclient does for HTTP, with the same events and metrics.
//
// An attempt's status code decides what happens (see [ClassifyCode]):
// UNAVAILABLE, RESOURCE_EXHAUSTED and the DEADLINE_EXCEEDED of one attempt
// are transient, retried while the call's time budget lasts; CANCELED is
// the caller's; INTERNAL, UNKNOWN and DATA_LOSS are failures that a retry
// will not fix; the other codes are the caller's fault. A server's
// grpc-retry-pushback-ms trailer is honoured as gRFC A6 says: a delay
// before the next attempt, or, negative or malformed, no retry at all
// (terminal for the call: still a breaker failure), which is how a
// service that already retried below says "don't retry" (package
// grpcsignal).
//
// Only idempotent methods are retried: those named by [RetryMethods], and
// those whose idempotency_level option is NO_SIDE_EFFECTS or IDEMPOTENT in
// the registered file descriptors. Another method is retried only with an
// idempotency key ([IdempotencyKey], [AutoIdempotencyKey], or the
// [MetadataKey] header set by hand), sent unchanged on every attempt, which
// a server deduplicates by (package grpcidempotency); without one it is
// tried once.
//
// Every retry says how many attempts came before it in the
// grpc-previous-rpc-attempts header. The pipeline's time budget is the
// call's deadline; each attempt's deadline is what remains of it, capped
// by the attempt timeout, and grpc-go sends it on as grpc-timeout.
//
// A stream is retried only while it is uncommitted (gRFC A6): until the
// response's headers or first message arrive, or it has sent more than
// [MaxReplayBuffer] bytes. A retry opens a new stream and replays, in
// order, the messages sent so far and the close of the sending side, so
// the server sees the same stream again. Once committed, a stream is the
// caller's as grpc-go hands it over: its errors come back as they are, and
// the breaker has counted it as a success. This holds for server, client
// and bidirectional streams.
//
// With [BreakerPerTarget] or [BreakerPerMethod], each target (or method)
// gets a breaker of its own, at most [MaxBreakers] of them. A call that a
// breaker rejects fails fast with codes.Unavailable and an error that
// matches breaker.ErrOpen. Every error a call returns is an [*Error],
// which unwraps to the pipeline's error and carries the call's status.
//
// A successful unary call allocates nothing beyond what grpc-go and the
// pipeline's own stages do.
package grpcclient

import (
	"context"
	"crypto/rand"
	"strconv"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/resiliencekit/resiliencekit/grpc/grpcidempotency"
	"github.com/resiliencekit/resiliencekit/grpc/grpcsignal"
	"github.com/resiliencekit/resiliencekit/internal/keyed"
	"github.com/resiliencekit/resiliencekit/pipeline"
)

// MetadataKey is the request header that carries an idempotency key, the
// same on every attempt of a call.
const MetadataKey = grpcidempotency.MetadataKey

// maxMethods bounds the methods whose idempotency is remembered; past it,
// the descriptors are read on every call.
const maxMethods = 4096

// Interceptor runs gRPC calls through a pipeline: [Interceptor.Unary] and
// [Interceptor.Stream] are grpc-go's client interceptors, and
// [Interceptor.DialOptions] installs both. One Interceptor serves any
// number of ClientConns; with [BreakerPerTarget] each target gets its own
// breaker. It is safe for concurrent use. The zero Interceptor works as
// New().
type Interceptor struct {
	cfg      *config
	breakers keyed.Map[breakerKey, *pipeline.Pipeline]
	methods  keyed.Map[string, bool] // whether a method is idempotent by its descriptor
}

type breakerKey struct{ target, method string }

// New returns an Interceptor configured by opts.
func New(opts ...Option) *Interceptor {
	return &Interceptor{cfg: newConfig(opts)}
}

func (ic *Interceptor) config() *config {
	if ic.cfg == nil {
		return defaultConfig
	}
	return ic.cfg
}

// DialOptions returns the dial options that install the interceptors,
// first in the chain, so that interceptors added after them (tracing, for
// one) see each attempt, and that turn off grpc-go's own retry policy, so
// that attempts are not multiplied by two retrying layers.
func (ic *Interceptor) DialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(ic.Unary),
		grpc.WithChainStreamInterceptor(ic.Stream),
		grpc.WithDisableRetry(),
	}
}

// singleAttempt is the call options of a call that is not retried.
var singleAttempt = []pipeline.CallOption{pipeline.SingleAttempt()}

// prepare returns the context of a call of method and, for a call that
// must not be retried, the pipeline options that say so. A key from an
// [IdempotencyKey] option, or made by [AutoIdempotencyKey], is added to
// the context's outgoing metadata.
func (ic *Interceptor) prepare(ctx context.Context, method string, opts []grpc.CallOption) (context.Context, []pipeline.CallOption) {
	cfg := ic.config()
	for _, o := range opts {
		if k, ok := o.(keyOption); ok {
			return metadata.AppendToOutgoingContext(ctx, MetadataKey, k.key), nil
		}
	}
	if cfg.retryMethods[method] || ic.idempotent(method) {
		return ctx, nil
	}
	if vs := metadata.ValueFromOutgoingContext(ctx, MetadataKey); len(vs) > 0 {
		return ctx, nil
	}
	if cfg.autoKey {
		return metadata.AppendToOutgoingContext(ctx, MetadataKey, rand.Text()), nil
	}
	return ctx, singleAttempt
}

// idempotent reports whether method's descriptor says it is idempotent.
func (ic *Interceptor) idempotent(method string) bool {
	v, ok := ic.methods.Get(method, maxMethods, idempotencyLevel)
	if !ok {
		return idempotencyLevel(method)
	}
	return v
}

// idempotencyLevel reports whether the descriptor of method, a full
// method name such as "/shop.Orders/Get", in protoregistry.GlobalFiles has
// an idempotency_level of NO_SIDE_EFFECTS or IDEMPOTENT.
func idempotencyLevel(method string) bool {
	name := strings.Replace(strings.TrimPrefix(method, "/"), "/", ".", 1)
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(name))
	if err != nil {
		return false
	}
	md, ok := d.(protoreflect.MethodDescriptor)
	if !ok {
		return false
	}
	opts, ok := md.Options().(*descriptorpb.MethodOptions)
	if !ok {
		return false
	}
	switch opts.GetIdempotencyLevel() {
	case descriptorpb.MethodOptions_NO_SIDE_EFFECTS, descriptorpb.MethodOptions_IDEMPOTENT:
		return true
	}
	return false
}

// pipelineFor returns the pipeline of a call of method to target: the
// configured one, or the one with the target's (or method's) breaker.
func (ic *Interceptor) pipelineFor(target, method string) *pipeline.Pipeline {
	cfg := ic.config()
	if cfg.newBreaker == nil {
		return cfg.pipeline
	}
	k := breakerKey{target: target}
	if cfg.perMethod {
		k.method = method
	}
	p, ok := ic.breakers.Get(k, cfg.maxBreakers, func(k breakerKey) *pipeline.Pipeline {
		return cfg.pipeline.With(pipeline.WithBreaker(cfg.newBreaker(k.target + k.method)))
	})
	if !ok {
		return cfg.pipeline
	}
	return p
}

// withPreviousAttempts adds the header of a retry after n attempts.
func withPreviousAttempts(ctx context.Context, n int) context.Context {
	return metadata.AppendToOutgoingContext(ctx, grpcsignal.PreviousAttemptsKey, strconv.Itoa(n))
}

// Unary is a grpc.UnaryClientInterceptor that runs each call through the
// pipeline. It returns nil or an [*Error]. The attempts of a call decode
// into the caller's one reply, so they must not overlap: the pipeline
// must not hedge (pipeline.WithHedging).
func (ic *Interceptor) Unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	ctx, once := ic.prepare(ctx, method, opts)
	c := unaryCalls.Get().(*unaryCall)
	c.cfg, c.method, c.req, c.reply, c.cc, c.invoker = ic.config(), method, req, reply, cc, invoker
	c.opts = append(append(c.opts[:0], opts...), grpc.Trailer(&c.trailer))
	_, err := pipeline.Do(ctx, ic.pipelineFor(cc.Target(), method), c.op, once...)
	clear(c.opts)
	*c = unaryCall{opts: c.opts[:0], op: c.op}
	unaryCalls.Put(c)
	return callError(err)
}

// unaryCall makes the attempts of one unary call. They are pooled, with
// the operation bound to each, so that a call allocates none.
type unaryCall struct {
	cfg        *config
	method     string
	req, reply any
	cc         *grpc.ClientConn
	invoker    grpc.UnaryInvoker
	opts       []grpc.CallOption // the caller's and the trailer's
	trailer    metadata.MD
	n          int // attempts made
	op         func(context.Context) (struct{}, error)
}

var unaryCalls = sync.Pool{New: func() any {
	c := new(unaryCall)
	c.op = c.run
	return c
}}

func (c *unaryCall) run(ctx context.Context) (struct{}, error) {
	c.n++
	if c.n > 1 {
		ctx = withPreviousAttempts(ctx, c.n-1)
	}
	c.trailer = nil
	if err := c.invoker(ctx, c.method, c.req, c.reply, c.cc, c.opts...); err != nil {
		return struct{}{}, c.cfg.classify(err, c.trailer)
	}
	return struct{}{}, nil
}
