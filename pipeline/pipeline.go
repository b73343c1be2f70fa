// Package pipeline runs the calls to one dependency through a time
// budget, a circuit breaker, a retry policy, hedging, a client-side
// throttle, a concurrency limit and an attempt timeout, each optional.
//
//	payments := pipeline.New(
//		pipeline.WithTimeBudget(2*time.Second),
//		pipeline.WithBreaker(breaker.New("payments")),
//		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3))),
//	)
//	receipt, err := pipeline.Do(ctx, payments, func(ctx context.Context) (Receipt, error) {
//		return client.Charge(ctx, order)
//	})
//
// The stages always run in this order, outermost first:
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
// A [resilience.Listener] ([WithListener]) hears everything a pipeline
// does, and the state changes of its breaker, whichever pipelines share
// it. A [resilience.Tracer] ([WithTracer]) sees each call and each of its
// attempts with their contexts, to record them as spans.
//
// One Pipeline serves every call to its dependency, whatever their result
// types: [Do] and [DoStream] take the type from the operation. The breaker
// stage runs the rest of the call inside the breaker's Execute: a
// successful call allocates nothing, and a panic or runtime.Goexit counts
// neither way.
//
// The stages are the methods of one value per call, in the order above,
// in stages.go; docs/architecture.md follows one call through them and
// says where a new stage goes.
package pipeline

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"weak"

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
	cfg.listener = safe.New(cfg.name, cfg.listeners...)
	cfg.listeners = nil
	cfg.givenRetry = cfg.retry
	if cfg.retry != nil && cfg.listener != nil {
		cfg.retry = cfg.retry.With(retrypolicy.WithListener(cfg.listener.TellsNoAttempts())) // the call tells them: see call.told
	}
	cfg.gates = cfg.buildGates()
	// The throttle refuses at once; a limit's queue or WaitWhenOpen may
	// hold a call between its budget and its first attempt.
	cfg.attemptFollows = cfg.limit == nil && !cfg.waitOpen
	// Before the breaker, only the budget (when not set behind it) and
	// hedging's and the tracer's state have work to do.
	cfg.intoBreaker = cfg.breaker != nil && (cfg.budget == 0 || cfg.budgetBehindBreaker()) && cfg.hedge == nil && cfg.tracer == nil
	if cfg.hedge != nil {
		cfg.hedgeTimers, cfg.spare = new(hedgeTimers), new(spareHedged)
	}
	p := &Pipeline{cfg: cfg, opts: opts}
	if cfg.breaker != nil {
		p.cfg.rejected = safe.New(cfg.name, cfg.breaker.Unheard(cfg.listener))
	}
	if p.cfg.rejected != nil {
		// The breaker holds the listener weakly, as a listener may refer
		// back to p: p stays collectable, and stops listening when it is.
		stop := cfg.breaker.Listen(weakListener{weak.Make(p.cfg.rejected)})
		runtime.AddCleanup(p, func(stop func()) { stop() }, stop)
	}
	return p
}

// weakListener passes events to a listener for as long as something else
// keeps it, its pipeline.
type weakListener struct{ l weak.Pointer[safe.Listener] }

func (w weakListener) OnEvent(e resilience.Event) { w.l.Value().Emit(e) }

// Members returns the listeners the pipeline's listener passes events to,
// none once it is gone.
func (w weakListener) Members() []resilience.Listener { return safe.Members(w.l.Value()) }

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

// Retries reports whether p has a retry stage ([WithRetry]): without one,
// every call through p makes a single attempt.
func (p *Pipeline) Retries() bool { return p != nil && p.cfg.retry != nil }

// Hedges reports whether calls through p may run attempts at once: it
// has a hedging stage ([WithHedging]). An integration whose attempts share
// state can then give each its own, or make its calls [Sequential].
func (p *Pipeline) Hedges() bool { return p != nil && p.cfg.hedge != nil }

// ErrAttemptTimeout is matched, with [context.DeadlineExceeded], by the
// error of an attempt that [WithAttemptTimeout] cut short, and by the error
// of a call whose last attempt it was; its message says "attempt timeout".
// It is also the attempt context's [context.Cause] once it expired.
// It also matches [context.DeadlineExceeded] itself and reports Timeout()
// true, as net.Error does, since an operation such as net/http returns
// the context's cause as it is.
var ErrAttemptTimeout error = attemptTimeout{}

type attemptTimeout struct{}

func (attemptTimeout) Error() string { return "attempt timeout" }

// Is makes the attempt timeout a deadline exceeded.
func (attemptTimeout) Is(target error) bool { return target == context.DeadlineExceeded }

// Timeout reports true, as context.DeadlineExceeded's does.
func (attemptTimeout) Timeout() bool { return true }

// Temporary reports true, as context.DeadlineExceeded's does.
func (attemptTimeout) Temporary() bool { return true }

var zero Pipeline

// Do runs op through p's stages and returns its result. Errors keep their
// causes for [errors.Is] and [errors.As]: a rejection matches
// [breaker.ErrOpen] or [breaker.ErrTooManyRequests], a retry that gave up
// is a [*retrypolicy.Error], and a spent time budget matches
// [context.DeadlineExceeded]. If op panics or calls [runtime.Goexit], the
// breaker counts the call neither way (gobreaker counts a failure), and
// the throttle and the concurrency limit learn nothing from the attempt:
// the caller's bug says nothing of the dependency, and calls that panic
// must not open the breaker for those that do not. Every context the
// call made is canceled, and the panic goes on. An error whose own methods panic as
// the stages ask it (a typed nil whose Unwrap dereferences it) is not
// retried by default, counts as a failure for the breaker, teaches the
// throttle and the limit nothing, and is returned.
//
// [breaker.ErrOpen]: https://pkg.go.dev/github.com/resiliencekit/resiliencekit/breaker#ErrOpen
// [breaker.ErrTooManyRequests]: https://pkg.go.dev/github.com/resiliencekit/resiliencekit/breaker#ErrTooManyRequests
func Do[T any](ctx context.Context, p *Pipeline, op resilience.Operation[T], opts ...CallOption) (T, error) {
	return start(ctx, p, op, nil, opts)
}

// DoStream is [Do] for a result that is still being read after op
// returns, such as an HTTP response's body: the contexts of the time budget
// and of the last attempt stay alive until release is called, on error too
// (an error may carry a result still to be read, such as an HTTP error
// response), while those of earlier attempts are canceled as the next one
// ends. The caller must call release once it is done with the result,
// whatever the error; release may be called more than once. If op panics or
// calls runtime.Goexit, every context is canceled at once. The
// concurrency limit's slot ([WithLimit]) is given back as op returns, not
// at release.
func DoStream[T any](ctx context.Context, p *Pipeline, op resilience.Operation[T], opts ...CallOption) (res T, release func(), err error) {
	if p == nil || p.cfg.budget == 0 && p.cfg.attemptTimeout == 0 && p.cfg.hedge == nil {
		// The call makes no context of its own: nothing to keep.
		res, err = start(ctx, p, op, nil, opts)
		return res, keepsNothing, err
	}
	kept := new(keeper)
	returned := false
	defer func() {
		if !returned { // a panic or runtime.Goexit
			kept.release()
		}
	}()
	res, err = start(ctx, p, op, kept, opts)
	returned = true
	return res, kept.release, err
}

// keepsNothing is the release of a streamed call that made no context.
func keepsNothing() {}

// start makes the value of one call and runs it through the stages. A call
// that is not timed goes straight into the breaker when the stages before
// it would only pass it on (config.intoBreaker); the end of it, if wanted,
// is told as it returns.
func start[T any](ctx context.Context, p *Pipeline, op resilience.Operation[T], k *keeper, opts []CallOption) (T, error) {
	if p == nil {
		p = &zero
	}
	var c call[T] // zeroed in place: a literal is built, then copied
	c.p, c.op, c.k, c.opts = p, op, k, callOf(opts)
	if l := p.cfg.listener; l != nil { // no call without a listener
		c.done, c.clock, c.attempts = l.CallStarts() // asked once a call: it counts the call
	}
	if ctx.Err() != nil { // over before it started: counted, and told as ended at once
		var zero T
		err := p.outOfTime(ctx, 0, nil)
		if c.done {
			c.ended(err, 0)
		}
		return zero, err
	}
	if p.cfg.intoBreaker && !c.clock { // the stages before it would only pass the call on
		if !c.done {
			return c.breaker(ctx)
		}
		return c.untimed(ctx)
	}
	return c.run(ctx)
}

// keeper holds the cancel functions of the contexts that a streamed result
// may still need: the time budget's and the last attempt's. A nil keeper
// keeps nothing: its owner cancels its contexts when it returns.
type keeper struct {
	budget, attempt context.CancelFunc
	own             *lazyCtx // ended with the others: a hedging race's first attempt's
	once            sync.Once
	hedge           int32 // a hedge's number in its race (2 for the first), for EventHedged; 0 if not a hedge
}

// release cancels the contexts kept; it may be called more than once, from
// any goroutine.
func (k *keeper) release() { k.once.Do(k.cancel) }

// cancel cancels the contexts kept, once: release, or its owner while no
// other goroutine has k.
func (k *keeper) cancel() {
	for _, c := range []context.CancelFunc{k.budget, k.attempt} {
		if c != nil {
			c()
		}
	}
	if k.own != nil {
		k.own.end()
	}
}

// outOfTime returns the error of a call whose ctx ended after attempts
// attempts: a [*retrypolicy.Error] as the retry stage gives, matching
// [retrypolicy.ErrOutOfTime] and [context.DeadlineExceeded] when time ran
// out, or [context.Canceled], so that a call tells the same story with or
// without a retry stage.
func (p *Pipeline) outOfTime(ctx context.Context, attempts int, last error) error {
	reason := ctx.Err()
	if reason == nil || errors.Is(reason, context.DeadlineExceeded) { // nil: passed by the clock, not yet heard of
		reason = retrypolicy.ErrOutOfTime
		p.cfg.listener.Emit(resilience.Event{Kind: resilience.EventTimeBudgetExceeded, Attempt: attempts, Err: last})
	}
	return &retrypolicy.Error{Attempts: attempts, Reason: reason, Last: last}
}
