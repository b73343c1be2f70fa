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
// before the next attempt (up to the retry policy's MaxDelay), or,
// negative or malformed, no retry at all (terminal for the call: still a
// breaker failure), which is how a service that already retried below says
// "don't retry" (package grpcsignal). ABORTED with a pushback is a "try
// again later", retried after it and not counted by the breaker
// (resilience.ClassPending): package grpcidempotency's answer to a repeat
// of a call that still runs.
//
// Only idempotent methods are retried: those named by [RetryMethods], and
// those whose idempotency_level option is NO_SIDE_EFFECTS or IDEMPOTENT in
// the registered file descriptors. Another method's unary calls are
// retried only with an idempotency key ([IdempotencyKey],
// [AutoIdempotencyKey], or the [idempotencykey.MetadataKey] header set by hand), sent
// unchanged on every attempt, which a server deduplicates by (package
// grpcidempotency); without one, and for its streams, which no server
// deduplicates, a call is tried once.
//
// Every retry says how many attempts came before it in the
// grpc-previous-rpc-attempts header, which replaces one forwarded from
// upstream. A call's grpc.OnFinish functions run once, after its last
// attempt, with its error.
//
// A pipeline that hedges (pipeline.WithHedging) hedges unary calls: each
// attempt decodes into a reply of its own, and the winner's is copied into
// the caller's. Streams are not hedged: their attempts follow one another. The pipeline's time budget is the
// call's deadline; each attempt's deadline is what remains of it, capped
// by the attempt timeout, and grpc-go sends it on as grpc-timeout. The
// error of an attempt that the attempt timeout ended, a unary call's or a
// stream's, matches pipeline.ErrAttemptTimeout.
//
// A stream is retried only while it is uncommitted (gRFC A6): until the
// response's headers or first message arrive, or it has sent more than
// [MaxReplayBuffer] bytes. A retry opens a new stream and replays, in
// order, the messages sent so far and the close of the sending side, so
// the server sees the same stream again. Once committed, a stream is the
// caller's as grpc-go hands it over: its errors come back as they are,
// and never retried; but one whose trailer says not to retry comes back
// as an [*Error] of class terminal with its status, so that a server of
// the caller's passes the "don't retry" on (package grpcsignal). The
// pipeline's call lasts until the stream ends, so that the breaker and the
// listener hear its final outcome: a stream that fails after it committed
// is a failure (terminal), not a success. A stream from which a message
// came and that the call's own deadline ended (the caller's, or the
// pipeline's time budget), as a bounded watch ends, ended by the caller's
// doing: the caller gets DEADLINE_EXCEEDED, and the breaker leaves it out
// (resilience.ClassRejected). One whose server sent no message, headers or
// not, counts as a unary call that its deadline ended does: a server that
// sends its headers and hangs is no healthier than one that hangs. This
// holds for server, client and bidirectional streams.
//
// An error that the dependency did not cause is neither retried nor
// counted by the breaker (resilience.ClassRejected): a message over a size
// limit (MaxCallSendMsgSize, MaxCallRecvMsgSize, the server's own), a
// request that does not marshal, a server certificate that the client does
// not trust; so is the caller's cancellation (CANCELED). See
// docs/retries.md for the table.
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
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/grpc/grpcsignal"
	"github.com/resiliencekit/resiliencekit/idempotencykey"
	"github.com/resiliencekit/resiliencekit/pipeline"
)

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
	cfg       *config
	breakers  *breaker.Group[breakerKey] // with BreakerPerTarget or BreakerPerMethod
	pipelines sync.Map                   // of each of breakers' breakers: *breaker.Breaker to *pipeline.Pipeline
	unguarded *pipeline.Pipeline         // with breakers, for the keys past MaxBreakers: no breaker
	methods   sync.Map                   // whether a method is idempotent by its descriptor: string to bool
	nMethods  atomic.Int64               // in methods, up to maxMethods
}

type breakerKey struct{ target, method string }

// New returns an Interceptor configured by opts.
func New(opts ...Option) *Interceptor {
	ic := &Interceptor{cfg: newConfig(opts)}
	if cfg := ic.cfg; cfg.newBreaker != nil {
		ic.unguarded = cfg.pipeline.With(pipeline.WithBreaker(nil))
		ic.breakers = breaker.NewGroup(cfg.maxBreakers, func(k breakerKey) *breaker.Breaker {
			b := cfg.newBreaker(k.target + k.method)
			if _, ok := ic.pipelines.Load(b); !ok { // newBreaker may give several keys one breaker
				ic.pipelines.Store(b, cfg.pipeline.With(pipeline.WithBreaker(b)))
			}
			return b
		})
	}
	return ic
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

// The pipeline's call options: of a call that is not retried, and of one
// whose attempts must not overlap.
var (
	singleAttempt = []pipeline.CallOption{pipeline.SingleAttempt()}
	sequential    = []pipeline.CallOption{pipeline.Sequential()}
)

// prepare returns the context of a call of method and, for a call that
// must not be retried, the pipeline options that say so. A key from an
// [IdempotencyKey] option, or made by [AutoIdempotencyKey], is set in the
// context's outgoing metadata, and a grpc-previous-rpc-attempts header
// forwarded from upstream is taken out of it. A stream of a method that is
// not idempotent is tried once, key or not: a server deduplicates unary
// calls only (package grpcidempotency), as a stream's outcome cannot be
// stored.
func (ic *Interceptor) prepare(ctx context.Context, method string, opts []grpc.CallOption, stream bool) (context.Context, []pipeline.CallOption) {
	cfg := ic.config()
	if len(metadata.ValueFromOutgoingContext(ctx, grpcsignal.PreviousAttemptsKey)) > 0 {
		ctx = withHeader(ctx, grpcsignal.PreviousAttemptsKey, "")
	}
	key := false
	for _, o := range opts {
		if k, ok := o.(keyOption); ok && k.key != "" {
			ctx, key = withHeader(ctx, idempotencykey.MetadataKey, k.key), true
		}
	}
	switch {
	case cfg.retryMethods[method] || ic.idempotent(method):
		return ctx, nil
	case stream:
		return ctx, singleAttempt
	case key || slices.ContainsFunc(metadata.ValueFromOutgoingContext(ctx, idempotencykey.MetadataKey), isKey):
		return ctx, nil
	case cfg.autoKey:
		return withHeader(ctx, idempotencykey.MetadataKey, rand.Text()), nil
	}
	return ctx, singleAttempt
}

func isKey(v string) bool { return v != "" }

// withHeader returns ctx with its outgoing metadata's key set to value
// alone, replacing what it had; an empty value takes key out.
func withHeader(ctx context.Context, key, value string) context.Context {
	md, _ := metadata.FromOutgoingContext(ctx) // a copy
	if md == nil {
		md = metadata.MD{}
	}
	if value == "" {
		md.Delete(key)
	} else {
		md.Set(key, value)
	}
	return metadata.NewOutgoingContext(ctx, md)
}

// idempotent reports whether method's descriptor says it is idempotent,
// remembered for the first maxMethods methods.
func (ic *Interceptor) idempotent(method string) bool {
	if v, ok := ic.methods.Load(method); ok {
		return v.(bool)
	}
	v := idempotencyLevel(method)
	if ic.nMethods.Add(1) > maxMethods {
		ic.nMethods.Add(-1)
	} else if _, known := ic.methods.LoadOrStore(method, v); known {
		ic.nMethods.Add(-1)
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
	if ic.breakers == nil {
		return ic.config().pipeline
	}
	k := breakerKey{target: target}
	if ic.cfg.perMethod {
		k.method = method
	}
	b, ok := ic.breakers.Get(k)
	if !ok {
		return ic.unguarded // past MaxBreakers
	}
	p, _ := ic.pipelines.Load(b) // stored before the Group handed b out
	return p.(*pipeline.Pipeline)
}

// withPreviousAttempts adds the header of a retry after n attempts.
func withPreviousAttempts(ctx context.Context, n int) context.Context {
	return metadata.AppendToOutgoingContext(ctx, grpcsignal.PreviousAttemptsKey, strconv.Itoa(n))
}

// Unary is a grpc.UnaryClientInterceptor that runs each call through the
// pipeline. It returns nil or an [*Error].
//
// Installed by hand (grpc.WithUnaryInterceptor or
// grpc.WithChainUnaryInterceptor) rather than by [Interceptor.DialOptions],
// it leaves grpc-go's own retry on: beside a service config retry policy,
// grpc-go retries each of the pipeline's attempts, and the attempts
// multiply (3 attempts of the pipeline times a policy of 4: 12 calls at
// the server). Add grpc.WithDisableRetry() to the dial options, as
// DialOptions does; an interceptor cannot switch it off for its calls
// alone. grpc-go's transparent retries (of a stream that never reached
// the server) stay on either way.
//
// A caller's grpc.OnFinish
// function is called once, with the call's error, after its last attempt;
// its grpc.Header and grpc.Trailer options get the last attempt's. With a
// pipeline that hedges (pipeline.WithHedging), each attempt decodes into a
// reply of its own, and the winner's is copied into reply.
func (ic *Interceptor) Unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	ctx, once := ic.prepare(ctx, method, opts, false)
	p := ic.pipelineFor(cc.Target(), method)
	if p.Hedges() && len(once) == 0 {
		if m, ok := reply.(proto.Message); ok {
			return ic.hedgedUnary(ctx, p, method, req, m, cc, invoker, opts)
		}
		once = sequential // attempts cannot each have a reply of their own
	}
	c := unaryCalls.Get().(*unaryCall)
	c.cfg, c.method, c.req, c.reply, c.cc, c.invoker = ic.config(), method, req, reply, cc, invoker
	c.opts, c.finish = callOptions(c.opts[:0], c.finish[:0], opts)
	c.opts = append(c.opts, grpc.Trailer(&c.trailer), grpc.Peer(&c.peer))
	returned := false
	defer func() {
		if !returned { // a panic or runtime.Goexit: the call is over all the same
			finish(c.finish, errAbandoned)
		}
	}()
	_, err := pipeline.Do(ctx, p, c.op, once...)
	returned = true
	err = callError(err)
	finish(c.finish, err)
	clear(c.opts)
	clear(c.finish)
	*c = unaryCall{opts: c.opts[:0], finish: c.finish[:0], op: c.op}
	unaryCalls.Put(c)
	return err
}

// errAbandoned is what a caller's OnFinish functions get for a call
// that panicked or called runtime.Goexit.
var errAbandoned = status.Error(codes.Unknown, "grpcclient: the call panicked or called runtime.Goexit")

// finish calls the caller's OnFinish functions with err.
func finish(fns []func(error), err error) {
	for _, f := range fns {
		f(err)
	}
}

// callOptions appends to opts the caller's options but grpc.OnFinish, and
// to finish the OnFinish functions, which run once a call.
func callOptions(opts []grpc.CallOption, finish []func(error), caller []grpc.CallOption) ([]grpc.CallOption, []func(error)) {
	for _, o := range caller {
		if f, ok := value(o).(grpc.OnFinishCallOption); ok {
			finish = append(finish, f.OnFinish)
		} else {
			opts = append(opts, o)
		}
	}
	return opts, finish
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
	finish     []func(error)     // the caller's OnFinish
	trailer    metadata.MD
	peer       peer.Peer // the attempt's server, if it had a stream to one
	n          int       // attempts made
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
	c.trailer, c.peer = nil, unreached
	if err := c.invoker(ctx, c.method, c.req, c.reply, c.cc, c.opts...); err != nil {
		return struct{}{}, timedOut(ctx, c.cfg.classify(err, c.trailer, attemptOf{c.req, c.reply, c.opts, reached(&c.peer)}))
	}
	return struct{}{}, nil
}

// hedgedAttempt is what one attempt of a hedged unary call received.
type hedgedAttempt struct {
	reply           proto.Message
	header, trailer metadata.MD
	peer            peer.Peer
}

// hedgedOptions are the caller's options of a hedged unary call: those
// that write into the caller's memory (header, trailer, peer) are kept
// aside, to be given the winner's, and OnFinish runs once a call.
type hedgedOptions struct {
	base              []grpc.CallOption
	headers, trailers []*metadata.MD
	peers             []*peer.Peer
	finish            []func(error)
}

func splitHedged(opts []grpc.CallOption) hedgedOptions {
	h := hedgedOptions{base: make([]grpc.CallOption, 0, len(opts)+3)}
	for _, o := range opts {
		switch v := value(o).(type) {
		case grpc.HeaderCallOption:
			h.headers = append(h.headers, v.HeaderAddr)
		case grpc.TrailerCallOption:
			h.trailers = append(h.trailers, v.TrailerAddr)
		case grpc.PeerCallOption:
			h.peers = append(h.peers, v.PeerAddr)
		case grpc.OnFinishCallOption:
			h.finish = append(h.finish, v.OnFinish)
		default:
			h.base = append(h.base, o)
		}
	}
	return h
}

// value returns o, or the struct o points to for one of grpc-go's option
// types that a caller may pass by pointer.
func value(o grpc.CallOption) grpc.CallOption {
	switch p := o.(type) {
	case *grpc.HeaderCallOption:
		return *p
	case *grpc.TrailerCallOption:
		return *p
	case *grpc.PeerCallOption:
		return *p
	case *grpc.OnFinishCallOption:
		return *p
	}
	return o
}

// hedgedUnary makes a unary call whose attempts may overlap: each decodes
// into a reply of its own, with its own header, trailer and peer, and the
// winner's are handed to the caller. It returns once every attempt has
// ended, the losers canceled, so that nothing below still uses req or the
// caller's options.
func (ic *Interceptor) hedgedUnary(ctx context.Context, p *pipeline.Pipeline, method string, req any, reply proto.Message, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts []grpc.CallOption) (err error) {
	cfg := ic.config()
	h := splitHedged(opts)
	var (
		n       atomic.Int64
		mu      sync.Mutex
		closed  bool
		running sync.WaitGroup
	)
	// Attempts make their replies from reply's type, never from reply,
	// which the caller's goroutine writes as a late hedge may start.
	typ := reply.ProtoReflect().Type()
	err = errAbandoned // unless the call returns: a panic or runtime.Goexit
	defer func() {
		mu.Lock()
		closed = true
		mu.Unlock()
		running.Wait() // the losers, canceled, end promptly
		finish(h.finish, err)
	}()
	res, err := pipeline.Do(ctx, p, func(ctx context.Context) (*hedgedAttempt, error) {
		mu.Lock()
		if closed { // a hedge launched as the call ended
			mu.Unlock()
			return nil, context.Canceled
		}
		running.Add(1)
		mu.Unlock()
		defer running.Done()
		if n := n.Add(1); n > 1 {
			ctx = withPreviousAttempts(ctx, int(n-1))
		}
		a := &hedgedAttempt{reply: typ.New().Interface(), peer: unreached}
		aopts := append(h.base[:len(h.base):len(h.base)], grpc.Header(&a.header), grpc.Trailer(&a.trailer), grpc.Peer(&a.peer))
		if err := invoker(ctx, method, req, a.reply, cc, aopts...); err != nil {
			return a, timedOut(ctx, cfg.classify(err, a.trailer, attemptOf{req, a.reply, h.base, reached(&a.peer)}))
		}
		return a, nil
	})
	if res != nil {
		if err == nil {
			proto.Reset(reply)
			proto.Merge(reply, res.reply)
		}
		for _, hd := range h.headers {
			*hd = res.header
		}
		for _, t := range h.trailers {
			*t = res.trailer
		}
		for _, pr := range h.peers {
			if reached(&res.peer) {
				*pr = res.peer
			}
		}
	}
	return callError(err)
}

// unreached is a peer grpc-go never writes: grpc.Peer's hook copies the
// stream's whole peer over it, whatever its addresses.
var unreached = peer.Peer{AuthInfo: unreachedInfo{}}

type unreachedInfo struct{}

func (unreachedInfo) AuthType() string { return "grpcclient-unreached" }

// reached reports whether grpc-go wrote p, set to unreached before the
// attempt: its stream reached a server. Told by type, as a peer's AuthInfo
// (TLS's) may not be comparable.
func reached(p *peer.Peer) bool {
	_, un := p.AuthInfo.(unreachedInfo)
	return !un
}
