// Package pipeline composes a time budget, a circuit breaker and a retry
// policy around calls to one dependency.
//
// The stages always run in this order, outermost first; each is optional:
//
//	time budget -> breaker -> retry -> hedging -> throttle -> concurrency limit -> attempt timeout -> operation
//
// The budget caps the whole call, retries and delays included, and the
// operation's context carries its deadline, so the next hop can see how
// much time is left. The breaker comes before the retry: when it is open the
// operation is not called at all, and it records one outcome per call, so
// retries that absorb a short blip do not trip it. Between attempts the
// retry stage asks the breaker again and stops at once if another call
// opened it, so a dependency that dies is not hammered by every in-flight
// retry loop. A call let through a half-open breaker is a probe and makes a
// single attempt. With [WaitWhenOpen], a call that finds the breaker open
// waits, within its budget, for the probe that closes it rather than
// failing, and sends nothing meanwhile.
//
// The stages inside the retry stage guard each attempt, retries and
// hedges alike: hedging ([WithHedging]) sends a twin of a slow attempt;
// the client-side throttle ([WithThrottle]) refuses attempts locally while
// the dependency refuses work; the concurrency limit ([WithLimit]) caps the
// attempts in flight, refusing or queueing within the budget. Their
// refusals are of class [resilience.ClassRejected]: not retried, not held
// against the dependency by the breaker.
//
// A [resilience.Tracer] ([WithTracer]) sees each call and each of its
// attempts with their contexts, to record them as spans.
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
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/internal/hook"
	"github.com/resiliencekit/resiliencekit/internal/safe"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/throttle"
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
	if cfg.waitOpen && cfg.breaker != nil {
		cfg.waiters = limit.NewAIMD(limit.MaxWaiting(math.MaxInt))
		cfg.backlog = new(atomic.Int64)
	}
	cfg.stateful = cfg.hedge != nil || cfg.tracer != nil
	cfg.perAttempt = cfg.stateful || cfg.attemptTimeout > 0 || cfg.throttle != nil || cfg.limit != nil || cfg.waiters != nil
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
	single     bool
	sequential bool // not hedged
	waited     bool // for the breaker (WaitWhenOpen): its attempts are paced
	discard    any  // a func(T) for results a hedged call does not return
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

// SingleAttempt makes a call skip the retry and hedging stages: it makes
// one attempt, still under the time budget, the breaker, the throttle, the
// concurrency limit and the attempt timeout. For a call that is not safe to
// repeat, such as a write without an idempotency key.
func SingleAttempt() CallOption { return singleAttempt{} }

type sequential struct{}

func (sequential) applyCall(c call) call {
	c.sequential = true
	return c
}

// Sequential makes a call skip the hedging stage: its attempts never
// overlap, each starting after the last has ended, as without
// [WithHedging]. For an operation that cannot run twice at once, such as
// one that writes into a single result the caller holds.
func Sequential() CallOption { return sequential{} }

// Hedges reports whether calls through p may run attempts at once: it
// has a hedging stage ([WithHedging]). An integration whose attempts share
// state can then give each its own, or make its calls [Sequential].
func (p *Pipeline) Hedges() bool { return p != nil && p.cfg.hedge != nil }

type discard[T any] func(T)

func (d discard[T]) applyCall(c call) call {
	c.discard = (func(T))(d)
	return c
}

// Discard gives a hedged call (see [WithHedging]) the way to dispose of a
// result it does not return, such as the response of an attempt that lost
// the race, or whose twin won: fn is called once for each, possibly on
// another goroutine and after the call has returned, with whatever the
// attempt returned (T's zero value included). Only a call of type T uses
// fn. Without it, such results are dropped as they are.
func Discard[T any](fn func(T)) CallOption { return discard[T](fn) }

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
	if p.cfg.stateful {
		return staged(ctx, p, op, k, c)
	}
	return timedCall(ctx, p, op, k, c, nil)
}

// staged runs a call with the state that the stages inside the retry
// stage keep, and reports it to the tracer.
func staged[T any](ctx context.Context, p *Pipeline, op resilience.Operation[T], k *keeper, c call) (res T, err error) {
	s := &state{p: p, single: c.single}
	if t := p.cfg.tracer; t != nil {
		ctx, s.trace = t.StartCall(ctx, p.cfg.name)
		returned := false
		defer func() {
			if !returned {
				err = errPanicked
			}
			s.trace.End(err)
		}()
		res, err = timedCall(ctx, p, op, k, c, s)
		returned = true
		return res, err
	}
	return timedCall(ctx, p, op, k, c, s)
}

// timedCall runs a call, timed for the listener if it wants to know.
func timedCall[T any](ctx context.Context, p *Pipeline, op resilience.Operation[T], k *keeper, c call, s *state) (T, error) {
	if l := p.cfg.listener; l.Wants(resilience.EventCallDone) {
		start := time.Now()
		res, err := execute(ctx, p, op, k, c, s)
		l.OnEvent(resilience.Event{Kind: resilience.EventCallDone, Duration: time.Since(start), Err: err})
		return res, err
	}
	return execute(ctx, p, op, k, c, s)
}

func execute[T any](ctx context.Context, p *Pipeline, op resilience.Operation[T], k *keeper, c call, s *state) (res T, err error) {
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
		return retry(ctx, p, nil, op, k, c, s)
	}
	run := func(ctx context.Context) error {
		var err error
		res, err = retry(ctx, p, b, op, k, c, s)
		return err
	}
	for waited := false; ; waited = true {
		err = b.Execute(ctx, run)
		if !p.cfg.waitOpen || !breaker.IsRejection(err) {
			return res, err
		}
		if !waited {
			c.waited = true
			p.cfg.backlog.Add(1)
			defer p.cfg.backlog.Add(-1)
			p.cfg.listener.Emit(resilience.Event{Kind: resilience.EventWaitOpen, Err: err})
		}
		if b.Wait(ctx, err) != nil {
			if ctx.Err() != nil {
				return res, p.outOfTime(ctx, 0, err)
			}
			return res, err // no probe within the budget
		}
	}
}

// retry runs the retry stage; b, if set, guards each retry, and a call
// admitted while b is not closed is a probe that makes one attempt.
func retry[T any](ctx context.Context, p *Pipeline, b *breaker.Breaker, op resilience.Operation[T], k *keeper, c call, s *state) (T, error) {
	var guard func() error
	if b != nil {
		guard = b.Check
	}
	probe := b != nil && b.Check() != nil
	if p.cfg.retry == nil || c.single || probe {
		return single(ctx, p, op, k, c, s, guard, !probe)
	}
	if !p.cfg.perAttempt {
		return retrypolicy.DoGuarded(ctx, p.cfg.retry, guard, op)
	}
	return retrypolicy.DoGuarded(ctx, p.cfg.retry, guard, func(ctx context.Context) (T, error) {
		return try(ctx, p, op, k, c, s, guard, true)
	})
}

// single runs the only attempt of a call without a retry stage.
// A probe is not hedged.
func single[T any](ctx context.Context, p *Pipeline, op resilience.Operation[T], k *keeper, c call, s *state, guard func() error, mayHedge bool) (T, error) {
	res, err := try(ctx, p, op, k, c, s, guard, mayHedge)
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
	throttle       *throttle.Throttle
	limit          *limit.Limiter
	hedge          *hedge.Policy
	waitOpen       bool
	waiters        *limit.Limiter // paces the calls that waited
	backlog        *atomic.Int64  // calls that waited, not yet over
	tracer         resilience.Tracer
	perAttempt     bool // some stage inside the retry stage is set
	stateful       bool // a call keeps a state: for hedging or the tracer
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

// WithThrottle guards each attempt with t, adaptive client-side throttling
// shared by every pipeline calling the same dependency: while the
// dependency refuses work, attempts are refused locally with an error
// matching [throttle.ErrThrottled], of class [resilience.ClassRejected],
// and reported as [resilience.EventThrottled]. Default none; nil means
// none.
func WithThrottle(t *throttle.Throttle) Option {
	return optionFunc(func(c *config) { c.throttle = t })
}

// WithLimit guards each attempt with l, a concurrency limit shared by
// every pipeline calling the same dependency: an attempt beyond it is
// refused with an error matching [limit.ErrLimited], of class
// [resilience.ClassRejected] and reported as [resilience.EventLimited], or
// waits for a slot within the time budget if l lets it. Default none; nil
// means none.
func WithLimit(l *limit.Limiter) Option {
	return optionFunc(func(c *config) { c.limit = l })
}

// WithHedging sends a twin of an attempt still running after h's delay,
// up to h's limit, and returns the first success, canceling the others
// (see [Discard] for what becomes of their results). Only calls that may
// be repeated are hedged: not a [SingleAttempt] call. The operation must
// be safe to run concurrently with itself. Each hedge takes a retry from
// the retry policy's quota, if any, and none is sent once the breaker has
// opened or an attempt failed with an error that is not retried. A hedged
// group of attempts counts as one attempt of the retry stage; each is
// reported as [resilience.EventHedged]. Default none; nil means none.
func WithHedging(h *hedge.Policy) Option {
	return optionFunc(func(c *config) { c.hedge = h })
}

// WaitWhenOpen makes a call that finds the breaker open (or half-open with
// its probes out) wait for it instead of failing at once: until the probe
// that closes it succeeds (it is woken at once) or, with no probe out yet,
// until the call may be the probe itself. It sends nothing meanwhile.
// Waiting calls go on in the order they came.
//
// It waits only within the time budget: a call whose deadline comes
// before the breaker's next probe fails at once, and one whose deadline
// comes while it waits fails with an error matching both the rejection
// and [retrypolicy.ErrOutOfTime]. The wait is reported as
// [resilience.EventWaitOpen].
//
// The backlog of calls that waited must not reach a dependency that has
// just come back all at once. So while any call that waited is not over,
// the attempts of every call go through an adaptive concurrency limit of
// the pipeline's own (limit.NewAIMD, attempts beyond it queued within
// their budget), which paces the backlog to what the dependency answers,
// doubling each round trip while it keeps up. With nothing waiting, the
// limit is not used: a healthy pipeline is neither capped nor slowed by
// it. Default off: a rejected call fails at once.
func WaitWhenOpen() Option {
	return optionFunc(func(c *config) { c.waitOpen = true })
}

// WithTracer reports each call and each of its attempts to t, with their
// contexts, to record them as spans. Default none, at no cost; nil means
// none.
func WithTracer(t resilience.Tracer) Option {
	return optionFunc(func(c *config) { c.tracer = t })
}
