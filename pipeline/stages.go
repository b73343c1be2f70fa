package pipeline

import (
	"context"
	"errors"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// call is one call through a pipeline. Its stages are its methods, below
// in the order they run, outermost first; each does its part and runs the
// next:
//
//	run      the call as the tracer and the listener see it (its span, EventCallDone)
//	budget   time budget (WithTimeBudget)
//	breaker  breaker (WithBreaker), and waiting for it (WaitWhenOpen)
//	retry    retry (WithRetry): runs hedge once per attempt
//	hedge    hedging (WithHedging): a race of twins, each an attempt
//	attempt  the gates, in order: throttle (WithThrottle), concurrency limit
//	         (WithLimit), the pacer of WaitWhenOpen; then the attempt's span
//	timeout  attempt timeout (WithAttemptTimeout), then the operation
//
// A new stage around the call is a method between two of these, calling
// the next; a new stage that admits each attempt is a gate (gates.go),
// built in config.buildGates. A call is a value on the caller's stack:
// with the stages that keep no state, a call allocates nothing.
type call[T any] struct {
	p     *Pipeline
	op    resilience.Operation[T]
	k     *keeper // the contexts a streamed result needs; nil for Do
	opts  callOpts
	s     *state           // for hedging and the tracer; nil without them
	b     *breaker.Breaker // checked between attempts; nil without one
	probe bool             // admitted by a breaker not closed: one attempt, not hedged
}

// run reports the call to the tracer, if any, and times it for the
// listener if it wants EventCallDone.
func (c *call[T]) run(ctx context.Context) (T, error) {
	cfg := &c.p.cfg
	if cfg.hedge != nil || cfg.tracer != nil {
		c.s = &state{p: c.p}
	}
	if cfg.tracer != nil {
		return c.traced(ctx)
	}
	return c.timed(ctx)
}

// traced runs the call within its span.
func (c *call[T]) traced(ctx context.Context) (res T, err error) {
	ctx, c.s.trace = c.p.cfg.tracer.StartCall(ctx, c.p.cfg.name)
	returned := false
	defer func() {
		if !returned {
			err = errPanicked
		}
		c.s.trace.End(err)
	}()
	res, err = c.timed(ctx)
	returned = true
	return res, err
}

// timed runs the call, timed for the listener if it wants EventCallDone.
func (c *call[T]) timed(ctx context.Context) (T, error) {
	if l := c.p.cfg.listener; l.Wants(resilience.EventCallDone) {
		start := time.Now()
		res, err := c.budget(ctx)
		l.OnEvent(resilience.Event{Kind: resilience.EventCallDone, Duration: time.Since(start), Err: err})
		return res, err
	}
	return c.budget(ctx)
}

// budget caps the rest of the call at the time budget, if any. Behind a
// breaker that a call does not wait for, the cap is set once the breaker
// has admitted the call (in through): a rejected call makes no context and
// no timer, and the budget, which a rejection takes nothing of, is the same.
func (c *call[T]) budget(ctx context.Context) (T, error) {
	if c.p.cfg.budget > 0 && !c.budgetBehindBreaker() {
		var done context.CancelFunc
		ctx, done = c.withBudget(ctx)
		defer done()
	}
	return c.breaker(ctx)
}

// budgetBehindBreaker reports whether the time budget is set once the
// breaker has admitted the call: there is a breaker, and calls do not wait
// for it (a wait is within the budget).
func (c *call[T]) budgetBehindBreaker() bool {
	return c.p.cfg.breaker != nil && !c.p.cfg.waitOpen
}

// withBudget returns ctx capped at the time budget, and what ends that
// cap. A caller's deadline that comes first already caps the call: it is
// left as it is, at no cost. A streamed call's cap is the keeper's to end.
func (c *call[T]) withBudget(ctx context.Context) (context.Context, context.CancelFunc) {
	d := c.p.cfg.budget
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= d {
		return ctx, nop
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	if c.k != nil {
		c.k.budget = cancel
		return ctx, nop
	}
	return ctx, cancel
}

func nop() {}

// breaker runs the rest of the call if the breaker admits it; with
// WaitWhenOpen, a call it rejects waits for it.
func (c *call[T]) breaker(ctx context.Context) (T, error) {
	b := c.p.cfg.breaker
	if b == nil {
		return c.retry(ctx)
	}
	c.b = b
	res, rejected, err := c.through(ctx, b)
	if rejected && c.p.cfg.waitOpen {
		return c.waitOpen(ctx, b, err)
	}
	return res, err
}

// through runs the rest of the call inside b. rejected reports that b
// refused it or, with WaitWhenOpen, stopped its retries: the call then
// waits. The listener hears of a refusal here, and of a stop from the
// retry stage. Only a call that failed pays for telling which.
func (c *call[T]) through(ctx context.Context, b *breaker.Breaker) (res T, rejected bool, err error) {
	ran := false
	err = b.Execute(ctx, func(ctx context.Context) error {
		ran = true
		if c.p.cfg.budget > 0 && c.budgetBehindBreaker() {
			var done context.CancelFunc
			ctx, done = c.withBudget(ctx)
			defer done()
		}
		var err error
		res, err = c.retry(ctx)
		return err
	})
	switch {
	case err == nil:
	case !ran:
		rejected = breaker.IsRejection(err)
		if rejected {
			c.p.cfg.rejected.Emit(resilience.Event{Kind: resilience.EventRejected, Err: err})
		}
	case c.p.cfg.waitOpen: // a call whose retries the breaker stopped waits too
		rejected = breaker.IsRejection(err)
	}
	return res, rejected, err
}

// waitOpen waits, within the budget, for the breaker that rejected a call
// with err, and tries the call again; its attempts are paced.
func (c *call[T]) waitOpen(ctx context.Context, b *breaker.Breaker, err error) (res T, _ error) {
	c.opts.waited = true
	backlog := &c.p.cfg.pacer.backlog
	backlog.Add(1)
	defer backlog.Add(-1)
	c.p.cfg.listener.Emit(resilience.Event{Kind: resilience.EventWaitOpen, Err: err})
	for rejected := true; rejected; {
		if b.Wait(ctx, err) != nil {
			if ctx.Err() != nil {
				return res, c.p.outOfTime(ctx, 0, err)
			}
			return res, err // no probe within the budget
		}
		res, rejected, err = c.through(ctx, b)
	}
	return res, err
}

// retry runs attempts until one succeeds or the policy gives up; the
// breaker's check stops it between attempts. A probe of a breaker not
// closed makes one attempt.
func (c *call[T]) retry(ctx context.Context) (T, error) {
	c.probe = c.b.Check() != nil
	if c.p.cfg.retry == nil || c.opts.single || c.probe {
		return c.once(ctx)
	}
	var guard func() error // a method value here, where it does not escape
	if c.b != nil {
		guard = c.b.Check
	}
	if c.direct() {
		return retrypolicy.DoGuarded(ctx, c.p.cfg.retry, guard, c.op)
	}
	return retrypolicy.DoGuarded(ctx, c.p.cfg.retry, guard, c.hedge)
}

// direct reports whether an attempt is the operation alone: no stage
// inside the retry stage is set, neither a gate nor hedging, the tracer
// (which need c.s) or the attempt timeout.
func (c *call[T]) direct() bool {
	return c.s == nil && len(c.p.cfg.gates) == 0 && c.p.cfg.attemptTimeout <= 0
}

// once runs the only attempt of a call that is not retried, and reports
// it as the retry stage would.
func (c *call[T]) once(ctx context.Context) (res T, err error) {
	if c.direct() {
		res, err = c.op(ctx)
	} else {
		res, err = c.hedge(ctx)
	}
	l := c.p.cfg.listener
	l.Emit(resilience.Event{Kind: resilience.EventAttempt, Attempt: 1, Err: err})
	if err != nil && ctx.Err() != nil {
		err = c.p.outOfTime(ctx, 1, err)
	} else if err != nil && c.p.cfg.retry != nil && (c.opts.single && resilience.Classify(err).Retryable() || resilience.IsUnrepeatable(err)) {
		l.Emit(resilience.Event{Kind: resilience.EventNotRetried, Attempt: 1, Err: err})
	}
	return res, err
}

// hedge runs one attempt of the retry stage, as a race of hedges if the
// pipeline hedges and the call may be repeated.
func (c *call[T]) hedge(ctx context.Context) (T, error) {
	if h := c.p.cfg.hedge; h != nil && !c.probe && !c.opts.single && !c.opts.sequential {
		if d, ok := h.After(); ok {
			return newRace(c).run(ctx, d)
		}
	}
	return c.attempt(ctx, false, nil)
}

// attempt sends one attempt if the gates admit it; sent, if not nil, is
// called once they have, as it is sent. The gates learn how it ended.
func (c *call[T]) attempt(ctx context.Context, hedge bool, sent func()) (res T, err error) {
	gates := c.p.cfg.gates
	if len(gates) == 0 && c.s == nil {
		return c.timeout(ctx)
	}
	info := c.s.start(hedge)
	held, refusal, err := acquire(ctx, gates, c.opts.waited)
	if err != nil {
		c.p.cfg.listener.Emit(resilience.Event{Kind: refusal, Attempt: info.Number, Err: err})
		return res, err
	}
	if sent != nil {
		sent()
	}
	return c.sent(ctx, info, held)
}

// sent runs an admitted attempt, with its span if the call is traced, and
// gives its outcome to the gates, the tracer and the hedging policy.
func (c *call[T]) sent(ctx context.Context, info resilience.AttemptInfo, held tickets) (res T, err error) {
	var end func(error)
	if c.s != nil && c.s.trace != nil {
		ctx, end = c.s.trace.StartAttempt(ctx, info)
	}
	var start time.Time
	if c.p.cfg.hedge.Learns() {
		start = time.Now()
	}
	returned := false
	defer func() {
		outcome := attemptOutcome(ctx, err, returned)
		release(c.p.cfg.gates, held, outcome)
		if end != nil {
			end(outcome)
		}
		c.s.ended(outcome)
	}()
	res, err = c.timeout(ctx)
	returned = true
	if !start.IsZero() {
		// Every attempt's latency, a loser's too: cut short by the
		// winner, it is a lower bound, and without it the slow tail
		// that hedging cuts would be left out of the quantile.
		c.p.cfg.hedge.Observe(time.Since(start))
	}
	return res, err
}

// attemptOutcome is what the gates and the tracer learn of an attempt
// that ended with err (returned false: it panicked or called
// runtime.Goexit).
func attemptOutcome(ctx context.Context, err error, returned bool) error {
	switch {
	case !returned:
		return errPanicked
	case err != nil && errors.Is(ctx.Err(), context.Canceled):
		return context.Canceled // abandoned, as a hedge that lost: not the dependency's failure
	}
	return err
}

// timeout runs the operation within the attempt timeout, if any.
func (c *call[T]) timeout(ctx context.Context) (T, error) {
	d := c.p.cfg.attemptTimeout
	if d <= 0 {
		return c.op(ctx)
	}
	ctx, cancel := context.WithTimeoutCause(ctx, d, ErrAttemptTimeout)
	if c.k == nil {
		defer cancel()
	} else {
		prev := c.k.attempt
		c.k.attempt = cancel
		if prev != nil {
			// The attempt before this one is over once this one has ended:
			// until then op may still read what it left, such as an error
			// body to drain so that its connection is reused.
			defer prev()
		}
	}
	res, err := c.op(ctx)
	if err != nil {
		err = timedOut(ctx, d, err)
	}
	return res, err
}

// timedOut names the attempt timeout in err if it is what ended the
// attempt: err is the bare context error (as most operations return it)
// and the attempt's own deadline passed, not the caller's or the budget's.
func timedOut(ctx context.Context, d time.Duration, err error) error {
	if context.Cause(ctx) != ErrAttemptTimeout || !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrAttemptTimeout) {
		return err
	}
	return &attemptTimeoutError{d: d, err: err}
}

// attemptTimeoutError is an attempt cut short by the attempt timeout. It
// matches ErrAttemptTimeout and whatever the operation returned
// ([context.DeadlineExceeded]).
type attemptTimeoutError struct {
	d   time.Duration
	err error
}

func (e *attemptTimeoutError) Error() string {
	return "attempt timeout (" + e.d.String() + ") exceeded: " + e.err.Error()
}

func (e *attemptTimeoutError) Unwrap() []error { return []error{ErrAttemptTimeout, e.err} }
