package grpcclient

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// Option configures an [Interceptor].
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	pipeline     *pipeline.Pipeline
	newBreaker   func(key string) *breaker.Breaker
	perMethod    bool
	maxBreakers  int
	retryMethods map[string]bool
	classes      [maxCode + 1]resilience.Class
	autoKey      bool
	maxReplay    int
}

// maxCode is the highest gRPC code, UNAUTHENTICATED.
const maxCode = codes.Unauthenticated

var defaultPipeline = pipeline.New(pipeline.WithRetry(retrypolicy.New()))

func newConfig(opts []Option) *config {
	c := &config{
		pipeline:     defaultPipeline,
		maxBreakers:  1024,
		retryMethods: map[string]bool{},
		maxReplay:    256 << 10,
	}
	for code, class := range defaultClasses {
		c.classes[code] = class
	}
	for _, o := range opts {
		if o != nil {
			o.apply(c)
		}
	}
	return c
}

var defaultConfig = newConfig(nil)

// WithPipeline runs every call through p: its time budget (the call's
// deadline), breaker, retry and attempt timeout (each attempt's deadline
// is what remains of the budget, capped by it). Use one Pipeline per
// dependency, shared with its other callers. Default: a pipeline that
// retries by retrypolicy.New() (4 attempts, 100 ms base, 10 s cap, full
// jitter), without a breaker or time budget; nil keeps the default.
func WithPipeline(p *pipeline.Pipeline) Option {
	return optionFunc(func(c *config) {
		if p != nil {
			c.pipeline = p
		}
	})
}

// BreakerPerTarget gives each target (the string a ClientConn was made
// for, such as "dns:///orders:443") a breaker of its own, made by
// newBreaker(target) on the target's first call, in place of the
// pipeline's breaker, so that one dead dependency does not fail the calls
// to the others through a shared Interceptor. The pipeline's other stages
// stay as they are. At most [MaxBreakers] targets get a breaker; calls to
// more go through the pipeline without a breaker (one shared by them would
// let a dead one fail the calls to the others, which a breaker per target
// is for). newBreaker may share state across
// replicas (breaker.Shared). It replaces [BreakerPerMethod]. Default off:
// one breaker, the pipeline's, for every call.
func BreakerPerTarget(newBreaker func(target string) *breaker.Breaker) Option {
	return optionFunc(func(c *config) { c.newBreaker, c.perMethod = newBreaker, false })
}

// BreakerPerMethod is [BreakerPerTarget] with a breaker for each method of
// each target, made by newBreaker(target + method), such as
// "dns:///orders:443/shop.Orders/Create", so that one failing method does
// not open the breaker of the others. It replaces [BreakerPerTarget].
// Default off.
func BreakerPerMethod(newBreaker func(key string) *breaker.Breaker) Option {
	return optionFunc(func(c *config) { c.newBreaker, c.perMethod = newBreaker, true })
}

// MaxBreakers bounds the breakers that [BreakerPerTarget] or
// [BreakerPerMethod] make, one per key (a breaker.Group): calls with a key
// past the bound go through the pipeline without a breaker. Default 1024.
// It panics if n < 1.
func MaxBreakers(n int) Option {
	if n < 1 {
		panic(fmt.Sprintf("grpcclient: MaxBreakers(%d): n must be 1 or more", n))
	}
	return optionFunc(func(c *config) { c.maxBreakers = n })
}

// RetryMethods adds full method names, such as "/shop.Orders/Get", to
// those retried without an idempotency key: the methods whose
// idempotency_level option, in the file descriptors registered in
// protoregistry.GlobalFiles (as generated code registers them), is
// NO_SIDE_EFFECTS or IDEMPOTENT. Calls with an idempotency key are retried
// whatever their method. It may be given more than once. It panics for a
// name not of the form "/package.Service/Method" (the package may be
// left out, as in gRPC's own names) made of protobuf identifiers.
func RetryMethods(methods ...string) Option {
	for _, m := range methods {
		if !fullMethodName(m) {
			panic(fmt.Sprintf("grpcclient: RetryMethods(%q): not a full method name such as \"/shop.Orders/Get\"", m))
		}
	}
	methods = slices.Clone(methods)
	return optionFunc(func(c *config) {
		for _, m := range methods {
			c.retryMethods[m] = true
		}
	})
}

// fullMethodName reports whether m is a full method name of gRPC:
// "/package.Service/Method", or "/Service/Method".
func fullMethodName(m string) bool {
	service, method, ok := strings.Cut(strings.TrimPrefix(m, "/"), "/")
	return ok && strings.HasPrefix(m, "/") &&
		protoreflect.FullName(service).IsValid() && protoreflect.Name(method).IsValid()
}

// ClassifyCode sets the class of the status code code: transient (retried,
// a breaker failure), permanent (the caller's fault: neither), terminal
// (not retried, a failure), canceled (neither retried nor counted) or
// pending (retried, not counted). It
// applies on top of the defaults and of earlier calls, and may be given
// more than once, as httpclient.ClassifyStatus. Default: UNAVAILABLE,
// RESOURCE_EXHAUSTED and DEADLINE_EXCEEDED transient; CANCELED canceled;
// INTERNAL, UNKNOWN and DATA_LOSS terminal; every other code permanent. It
// panics for codes.OK, a code above UNAUTHENTICATED, or a class that is
// none of these (resilience.ClassSuccess included: a failing code is
// always an error to the caller).
func ClassifyCode(code codes.Code, class resilience.Class) Option {
	if code == codes.OK || code > maxCode || class == resilience.ClassSuccess || class > resilience.ClassCanceled && class != resilience.ClassPending {
		panic(fmt.Sprintf("grpcclient: ClassifyCode(%v, %v): a failing code and a failure class", code, class))
	}
	return optionFunc(func(c *config) { c.classes[code] = class })
}

// AutoIdempotencyKey gives every unary call of a method that is not
// retried by itself (see [RetryMethods]) and has no idempotency key a
// fresh random one, the same on all its attempts, so that it can be retried. Use it
// only against servers that deduplicate by the key (package
// grpcidempotency). Default off.
func AutoIdempotencyKey() Option {
	return optionFunc(func(c *config) { c.autoKey = true })
}

// ErrReplayBufferFull is matched by the error that the pipeline's
// listener hears for a stream that failed, with an error that would have
// been retried, before its response began, but after it had sent more
// than [MaxReplayBuffer] bytes: it could not be replayed, so it was not
// retried, which the listener hears as resilience.EventNotRetried. The caller's RecvMsg returns grpc-go's error, as for any
// committed stream.
var ErrReplayBufferFull = errors.New("grpcclient: stream not retried: its messages outgrew the replay buffer")

// MaxReplayBuffer sets how many bytes of request messages (by proto.Size)
// a stream keeps to replay them on a retry. A stream that sends more
// commits: it is not retried any more, as when its response has begun;
// if it then fails before its response begins, the call's error (as the
// pipeline's listener hears it) matches [ErrReplayBufferFull].
// Default 256 KiB, as grpc-go's own retry buffer. 0 keeps nothing: a
// stream is retried only until its first message is sent. It panics if
// n < 0.
func MaxReplayBuffer(n int) Option {
	if n < 0 {
		panic(fmt.Sprintf("grpcclient: MaxReplayBuffer(%d): n must be 0 or more", n))
	}
	return optionFunc(func(c *config) { c.maxReplay = n })
}

// keyOption is the call option of [IdempotencyKey].
type keyOption struct {
	grpc.EmptyCallOption
	key string
}

// IdempotencyKey is a call option that sends key in the [idempotencykey.MetadataKey]
// header on every attempt of the call, which lets a unary call of a method
// that is not idempotent be retried: the server runs it once (package
// grpcidempotency). It replaces a key set in the outgoing metadata by
// hand, which counts as well; an empty key is none. It does nothing
// without an [Interceptor].
func IdempotencyKey(key string) grpc.CallOption { return keyOption{key: key} }
