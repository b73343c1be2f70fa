// Package pipeline composes a time budget, a circuit breaker and a retry
// policy around calls to one dependency.
//
// The stages always run in this order, outermost first:
//
//	time budget -> breaker -> retry -> attempt timeout -> operation
//
// The budget caps the whole call, retries and delays included, and the
// operation's context carries its deadline, so the next hop can see how
// much time is left. The breaker comes before the retry: when it is open the
// operation is not called at all, and it records one outcome per call, so
// retries that absorb a short blip do not trip it. Between attempts the
// retry stage asks the breaker again and stops at once if another call
// opened it, so a dependency that dies is not hammered by every in-flight
// retry loop. A call let through a half-open breaker is a probe and makes a
// single attempt.
//
// One Pipeline serves every call to its dependency, whatever their result
// types: [Do] and [DoStream] take the type from the operation. The breaker
// stage runs the rest of the call inside the breaker's Execute, rather than
// gobreaker's two-step Allow and done: the two-step form allocates a
// closure per call and does not see a panic; this way a successful call
// allocates nothing, and a panic or runtime.Goexit counts as a failure.
package pipeline

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/internal/hook"
	"github.com/resiliencekit/resiliencekit/internal/safe"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// Pipeline runs calls to one dependency through its stages. It holds no
// result type: calls of any type run through one Pipeline with [Do] and
// [DoStream]. It is immutable and safe for concurrent use. A nil or zero
// Pipeline runs each operation once, as it is.
type Pipeline struct {
	cfg  config
	opts []Option // what New was given, for With
}

// New returns a Pipeline with the stages that opts configure. Without
// options it runs the operation once, as it is.
func New(opts ...Option) *Pipeline {
	var cfg config
	for _, o := range opts {
		if o != nil {
			o.apply(&cfg)
		}
	}
	if cfg.name == "" && cfg.breaker != nil {
		cfg.name = cfg.breaker.Name()
	}
	if cfg.breaker != nil {
		hook.ClaimBreakerEvents(cfg.breaker, resilience.Listeners(cfg.listeners...))
	}
	cfg.listener = safe.New(cfg.name, cfg.listeners...)
	cfg.listeners = nil
	if cfg.retry != nil && cfg.listener != nil {
		cfg.retry = cfg.retry.With(retrypolicy.WithListener(cfg.listener))
	}
	return &Pipeline{cfg: cfg, opts: opts}
}

// MaxAttempts returns the most attempts a call through p would make now:
// 1 without a retry stage, for a [SingleAttempt] call, or while p's breaker
// is not closed (a probe makes one attempt), else its policy's limit, 0 for
// none but the time budget.
func (p *Pipeline) MaxAttempts(opts ...CallOption) int {
	c := callOf(opts)
	if p == nil || p.cfg.retry == nil || c.single || (p.cfg.breaker != nil && p.cfg.breaker.Check() != nil) {
		return 1 // a probe of a breaker not closed makes one attempt
	}
	return p.cfg.retry.MaxAttempts()
}

// With returns a new Pipeline with p's options and then opts, such as the
// same stages with another breaker. p is unchanged; a nil p has none.
func (p *Pipeline) With(opts ...Option) *Pipeline {
	if p == nil {
		return New(opts...)
	}
	return New(append(p.opts[:len(p.opts):len(p.opts)], opts...)...)
}

var zero Pipeline

// CallOption changes how one call runs through a [Pipeline].
type CallOption interface {
	applyCall(call) call
}

type call struct {
	single bool
}

type singleAttempt struct{}

func (singleAttempt) applyCall(c call) call {
	c.single = true
	return c
}

// callOf applies opts, nil ones skipped.
func callOf(opts []CallOption) call {
	var c call
	for _, o := range opts {
		if o != nil {
			c = o.applyCall(c) // by value: a pointer would escape
		}
	}
	return c
}

// SingleAttempt makes a call skip the retry stage: it makes one attempt,
// still under the time budget, the breaker and the attempt timeout. For a
// call that is not safe to repeat, such as a write without an idempotency
// key.
func SingleAttempt() CallOption { return singleAttempt{} }

// Do runs op through p's stages and returns its result. Errors keep their
// causes for [errors.Is] and [errors.As]: a rejection matches
// [breaker.ErrOpen] or [breaker.ErrTooManyRequests], a retry that gave up
// is a [*retrypolicy.Error], and a spent time budget matches
// [context.DeadlineExceeded]. If op panics or calls [runtime.Goexit], the
// breaker counts a failure, every context the call made is canceled, and
// the panic goes on.
func Do[T any](ctx context.Context, p *Pipeline, op resilience.Operation[T], opts ...CallOption) (T, error) {
	return run(ctx, p, op, nil, opts)
}

// DoStream is [Do] for a result that is still being read after op
// returns, such as an HTTP response's body: the contexts of the time budget
// and of the last attempt stay alive until release is called, on error too
// (an error may carry a result still to be read, such as an HTTP error
// response), while those of earlier attempts are canceled as the next one
// ends. The caller must call release once it is done with the result,
// whatever the error; release may be called more than once. If op panics or
// calls runtime.Goexit, every context is canceled at once.
func DoStream[T any](ctx context.Context, p *Pipeline, op resilience.Operation[T], opts ...CallOption) (res T, release func(), err error) {
	kept := new(keeper)
	returned := false
	defer func() {
		if !returned { // a panic or runtime.Goexit
			kept.release()
		}
	}()
	res, err = run(ctx, p, op, kept, opts)
	returned = true
	return res, kept.release, err
}

// keeper holds the cancel functions of the contexts that a streamed result
// may still need: the time budget's and the last attempt's. A nil keeper
// keeps nothing: its owner cancels its contexts when it returns.
type keeper struct {
	budget, attempt context.CancelFunc
	once            sync.Once
}

// release cancels the contexts kept; it may be called more than once, from
// any goroutine.
func (k *keeper) release() {
	k.once.Do(func() {
		for _, c := range []context.CancelFunc{k.budget, k.attempt} {
			if c != nil {
				c()
			}
		}
	})
}

func run[T any](ctx context.Context, p *Pipeline, op resilience.Operation[T], k *keeper, opts []CallOption) (T, error) {
	if p == nil {
		p = &zero
	}
	c := callOf(opts)
	if ctx.Err() != nil {
		var zero T
		return zero, p.outOfTime(ctx, 0, nil)
	}
	if l := p.cfg.listener; l.Wants(resilience.EventCallDone) {
		start := time.Now()
		res, err := execute(ctx, p, op, k, c)
		l.OnEvent(resilience.Event{Kind: resilience.EventCallDone, Duration: time.Since(start), Err: err})
		return res, err
	}
	return execute(ctx, p, op, k, c)
}

func execute[T any](ctx context.Context, p *Pipeline, op resilience.Operation[T], k *keeper, c call) (res T, err error) {
	if p.cfg.budget > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.cfg.budget)
		if k == nil {
			defer cancel()
		} else {
			k.budget = cancel
		}
	}
	b := p.cfg.breaker
	if b == nil {
		return retry(ctx, p, nil, op, k, c)
	}
	err = b.Execute(ctx, func(ctx context.Context) error {
		var err error
		res, err = retry(ctx, p, b, op, k, c)
		return err
	})
	return res, err
}

// retry runs the retry stage; b, if set, guards each retry, and a call
// admitted while b is not closed is a probe that makes one attempt.
func retry[T any](ctx context.Context, p *Pipeline, b *breaker.Breaker, op resilience.Operation[T], k *keeper, c call) (T, error) {
	if p.cfg.retry == nil || c.single || (b != nil && b.Check() != nil) {
		return single(ctx, p, op, k, c)
	}
	var guard func() error
	if b != nil {
		guard = b.Check
	}
	if p.cfg.attemptTimeout <= 0 {
		return retrypolicy.DoGuarded(ctx, p.cfg.retry, guard, op)
	}
	return retrypolicy.DoGuarded(ctx, p.cfg.retry, guard, func(ctx context.Context) (T, error) {
		return attempt(ctx, p, op, k)
	})
}

// single runs the only attempt of a call without a retry stage.
func single[T any](ctx context.Context, p *Pipeline, op resilience.Operation[T], k *keeper, c call) (T, error) {
	res, err := attempt(ctx, p, op, k)
	p.cfg.listener.Emit(resilience.Event{Kind: resilience.EventAttempt, Attempt: 1, Err: err})
	if err != nil && ctx.Err() != nil {
		err = p.outOfTime(ctx, 1, err)
	} else if err != nil && c.single && p.cfg.retry != nil && resilience.Classify(err).Retryable() {
		p.cfg.listener.Emit(resilience.Event{Kind: resilience.EventNotRetried, Attempt: 1, Err: err})
	}
	return res, err
}

// outOfTime returns the error of a call whose ctx ended after attempts
// attempts: a [*retrypolicy.Error] as the retry stage gives, matching
// [retrypolicy.ErrOutOfTime] and [context.DeadlineExceeded] when time ran
// out, or [context.Canceled], so that a call tells the same story with or
// without a retry stage.
func (p *Pipeline) outOfTime(ctx context.Context, attempts int, last error) error {
	reason := ctx.Err()
	if errors.Is(reason, context.DeadlineExceeded) {
		reason = retrypolicy.ErrOutOfTime
		p.cfg.listener.Emit(resilience.Event{Kind: resilience.EventTimeBudgetExceeded, Attempt: attempts, Err: last})
	}
	return &retrypolicy.Error{Attempts: attempts, Reason: reason, Last: last}
}

// attempt runs op once within the attempt timeout, if any.
func attempt[T any](ctx context.Context, p *Pipeline, op resilience.Operation[T], k *keeper) (T, error) {
	if p.cfg.attemptTimeout <= 0 {
		return op(ctx)
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.attemptTimeout)
	if k == nil {
		defer cancel()
		return op(ctx)
	}
	prev := k.attempt
	k.attempt = cancel
	if prev != nil {
		// The attempt before this one is over once this one has ended:
		// until then op may still read what it left, such as an error
		// body to drain so that its connection is reused.
		defer prev()
	}
	return op(ctx)
}

// Option configures a [Pipeline]. Options are not tied to a result type.
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	breaker        *breaker.Breaker
	retry          *retrypolicy.Policy
	budget         time.Duration
	attemptTimeout time.Duration
	name           string
	listeners      []resilience.Listener // until New combines them
	listener       *safe.Listener
}

// WithBreaker guards calls with b, shared by every pipeline calling the
// same dependency. Default none; nil means none.
func WithBreaker(b *breaker.Breaker) Option {
	return optionFunc(func(c *config) { c.breaker = b })
}

// WithRetry retries failed attempts by policy p; its [retrypolicy.Quota],
// if any, caps the retries. Default none: one attempt; nil means none.
func WithRetry(p *retrypolicy.Policy) Option {
	return optionFunc(func(c *config) { c.retry = p })
}

// WithTimeBudget caps each call, all attempts and delays included, at d;
// the operation's context carries the deadline. It is the only time budget
// option: the retry policy keeps to it. Default none (only the caller's
// context's deadline); 0 means none. It panics if d is negative.
func WithTimeBudget(d time.Duration) Option {
	if d < 0 {
		panic(fmt.Sprintf("pipeline: WithTimeBudget(%v): d must be 0 (none) or more", d))
	}
	return optionFunc(func(c *config) { c.budget = d })
}

// WithAttemptTimeout caps each single attempt at d, within the budget; an
// attempt that times out is a transient failure and may be retried. Default
// none; 0 means none. It panics if d is negative.
func WithAttemptTimeout(d time.Duration) Option {
	if d < 0 {
		panic(fmt.Sprintf("pipeline: WithAttemptTimeout(%v): d must be 0 (none) or more", d))
	}
	return optionFunc(func(c *config) { c.attemptTimeout = d })
}

// WithName names the dependency in events. Default the breaker's name.
func WithName(name string) Option {
	return optionFunc(func(c *config) { c.name = name })
}

// WithListener reports to l the end of every call, each attempt, each
// scheduled retry and why a call gave up, named by [WithName]. It also
// makes l the listener of the pipeline's breaker, for its state changes
// and rejections, if the breaker has none yet: a breaker has one listener,
// its own ([breaker.WithListener]) or that of the first pipeline built on
// it with one, so no event is heard twice and building pipelines adds
// nothing to a breaker. See [resilience.Listener] for what l must do.
// Default none, at no cost.
func WithListener(l resilience.Listener) Option {
	return optionFunc(func(c *config) {
		if l != nil {
			c.listeners = append(c.listeners, l)
		}
	})
}
