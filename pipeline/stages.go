package pipeline

import (
	"context"
	"errors"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/internal/classify"
	"github.com/resiliencekit/resiliencekit/internal/monotime"
	"github.com/resiliencekit/resiliencekit/internal/safe"
	"github.com/resiliencekit/resiliencekit/internal/sendtime"
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
//	attempt  the gates, in order: the pacer of WaitWhenOpen, throttle
//	         (WithThrottle), concurrency limit (WithLimit); then the
//	         attempt's span
//	timeout  attempt timeout (WithAttemptTimeout), then the operation
//
// A new stage around the call is a method between two of these, calling
// the next; a new stage that admits each attempt is a gate (gates.go),
// built in config.buildGates. A call is a value on the caller's stack:
// with the stages that keep no state, a call allocates nothing. A call
// starts at the first stage that does something for it, so that those
// that would only pass it on cost nothing: start goes straight to the
// breaker when the stages before it have nothing to do (config.intoBreaker,
// and no listener wants the call timed), and each attempt starts at the
// stage firstInside names.
type call[T any] struct {
	p    *Pipeline
	op   resilience.Operation[T]
	k    *keeper // the contexts a streamed result needs; nil for Do
	opts callOpts
	s    *state           // for hedging and the tracer; nil without them
	b    *breaker.Breaker // checked between attempts; nil without one

	// The budget leaves these to the first attempt's timeout, which
	// follows it at once: the clock reading the budget was set from, and
	// the attempt's context, allocated with the budget's.
	now   monotime.Reading // with spare, if config.attemptFollows
	spare *lazyCtx

	probe    bool               // admitted by a breaker not closed: one attempt, not hedged
	done     bool               // the listener wants EventCallDone
	clock    bool               // and its Duration: the call is timed
	attempts bool               // the listener wants EventAttempt
	via      int8               // the first stage of each attempt, with attempts or a breaker
	ran      bool               // the breaker admitted the call: inside ran
	budgeted bool               // the time budget, not the caller, set the call's deadline
	hedged   bool               // a race of the call sent a hedge (Hedged); of a hedge's copy, it was sent
	shared   bool               // a race of the call may have let another goroutine have c.s
	tries    int32              // attempts the retry stage ran since the breaker admitted the call, with a breaker
	n        int                // attempts told by this run of the retry stage, with attempts
	caller   context.Context    // with WaitWhenOpen and budgeted, the caller's context, for the breaker
	stopped  *retrypolicy.Error // with WaitWhenOpen, the retry stage's stop by the breaker that the call waited out; nil if none
	refused  error              // the breaker's refusal of the last attempt as it was about to be sent (reopened): not sent
	sentAt   monotime.Reading   // when the call's last retry was sent, for the breaker to time its answer from; 0 if none
	res      T                  // what inside leaves for through
	race     *race[T]           // for the call's first race, allocated with c.s; nil once used
}

// hedged is the state of a hedged call with the memory of its first race,
// in one allocation; self is h, for [spareHedged].
type hedged[T any] struct {
	state state
	race  race[T]
	self  any
}

// run reports the call to the tracer, if any, and times it for the
// listener if it wants EventCallDone.
func (c *call[T]) run(ctx context.Context) (res T, err error) {
	cfg := &c.p.cfg
	var h *hedged[T]
	reused := false
	switch {
	case cfg.hedge != nil:
		if by, _ := ctx.Value(hedgeKey{}).(*Pipeline); by == c.p {
			ctx = context.WithValue(ctx, hedgeKey{}, (*Pipeline)(nil)) // a call that a hedge of p's makes through p is a call of its own
		}
		h, reused = newHedged[T](cfg.spare, c.k == nil) // a streamed call's keeper may hold its first race's
		h.state.p = c.p
		c.s, c.race = &h.state, &h.race
	case cfg.tracer != nil:
		c.s = &state{p: c.p}
	}
	if cfg.tracer != nil {
		res, err = c.traced(ctx)
	} else {
		res, err = c.timed(ctx)
	}
	if reused && !c.shared {
		putHedged(cfg.spare, h)
	}
	return res, err
}

// traced runs the call within its span.
func (c *call[T]) traced(ctx context.Context) (res T, err error) {
	ctx, c.s.trace = safe.StartCall(c.p.cfg.tracer, ctx, c.p.cfg.name)
	returned := false
	defer func() {
		if !returned {
			err = errPanicked
		}
		c.s.end(err)
	}()
	res, err = c.timed(ctx)
	returned = true
	return res, err
}

// timed runs the call, timed for the listener if it wants EventCallDone
// with its Duration; a CallTimer that declined to time it gets it Untimed,
// with no clock read.
func (c *call[T]) timed(ctx context.Context) (T, error) {
	if !c.done {
		return c.budget(ctx)
	}
	var start monotime.Reading
	if c.clock {
		start = monotime.Now()
	}
	returned := false
	defer func() {
		if !returned { // a panic or runtime.Goexit, which goes on: the call ended, failed
			var took time.Duration
			if c.clock {
				took = monotime.Since(start)
			}
			c.ended(errPanicked, took)
		}
	}()
	res, err := c.budget(ctx)
	returned = true
	var took time.Duration
	if c.clock {
		took = monotime.Since(start)
	}
	c.ended(err, took)
	return res, err
}

// untimed runs a call that the listener wants told as it ends, but not
// timed, straight into the breaker (config.intoBreaker), and tells its
// end: a panic's or runtime.Goexit's too, as timed does.
func (c *call[T]) untimed(ctx context.Context) (res T, err error) {
	returned := false
	defer func() {
		if !returned {
			c.ended(errPanicked, 0)
		}
	}()
	res, err = c.breaker(ctx)
	returned = true
	c.ended(err, 0)
	return res, err
}

// ended tells the listener, which wanted it, that the call ended with err
// after took, or untimed if the call was not timed.
func (c *call[T]) ended(err error, took time.Duration) {
	c.p.cfg.listener.Wanted(resilience.Event{Kind: resilience.EventCallDone, Duration: took, Err: err, Untimed: !c.clock})
}

// budget caps the rest of the call at the time budget, if any. Behind a
// breaker that a call does not wait for, the cap is set once the breaker
// has admitted the call (in through): a rejected call makes no context and
// no timer, and the budget, which a rejection takes nothing of, is the same.
func (c *call[T]) budget(ctx context.Context) (res T, err error) {
	if c.p.cfg.budget > 0 && !c.p.cfg.budgetBehindBreaker() {
		caller := ctx
		var end *lazyCtx
		if ctx, end = c.withBudget(ctx); end != nil {
			defer end.end()
		}
		if c.budgeted {
			c.caller = caller
		}
	}
	res, err = c.breaker(ctx)
	if c.budgeted {
		ownBudget(err)
	}
	return res, err
}

// ownBudget marks err, a call's whose time budget set its deadline, as out
// of that budget's time, if it ran out of time.
func ownBudget(err error) {
	if re, ok := err.(*retrypolicy.Error); ok && errors.Is(re.Reason, retrypolicy.ErrOutOfTime) {
		re.OwnBudget = true
	}
}

// budgetBehindBreaker reports whether the time budget is set once the
// breaker has admitted the call: there is a breaker, and calls do not wait
// for it (a wait is within the budget).
func (cfg *config) budgetBehindBreaker() bool {
	return cfg.breaker != nil && !cfg.waitOpen
}

// withBudget returns ctx capped at the time budget, and the cap for the
// call to end, if it is the call's to end. A caller's deadline that comes
// first already caps the call: it is left as it is, at no cost. A
// streamed call's cap is the keeper's to end.
func (c *call[T]) withBudget(ctx context.Context) (context.Context, *lazyCtx) {
	cfg := &c.p.cfg
	now := monotime.Now()
	if dl, ok := ctx.Deadline(); ok && dl.Sub(now.Time()) <= cfg.budget {
		return ctx, nil
	}
	var bc *lazyCtx
	if cfg.attemptTimeout > 0 {
		pair := new([2]lazyCtx)
		bc, c.spare = &pair[0], &pair[1]
		if cfg.attemptFollows {
			c.now = now
		}
	} else {
		bc = new(lazyCtx)
	}
	bc.set(ctx, now, cfg.budget, false)
	c.budgeted = true
	if c.k != nil {
		c.k.budget = bc.end
		return bc, nil
	}
	return bc, bc
}

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
	c.ran, c.tries, c.sentAt = false, 0, 0
	if c.caller != nil {
		// The budget, set before the breaker so that a wait is within it,
		// is the pipeline's own limit: the breaker is given the caller's
		// context, whose deadline alone is the caller's doing.
		err = b.Execute(c.caller, func(context.Context) error { return c.inside(ctx) })
	} else {
		err = b.Execute(ctx, c.inside)
	}
	res, c.res = c.res, res
	if err != nil {
		_, err = sendtime.Open(0, err) // a success, for a breaker that did not time it (forced, disabled)
	}
	if w, ok := err.(*waitedOut); ok {
		err = w.err
	}
	switch {
	case err == nil:
	case !c.ran:
		rejected = breaker.IsRejection(err)
		if l := c.p.cfg.rejected; rejected && l != nil { // no event built for no listener, as the breaker's
			l.OnEvent(resilience.Event{Kind: resilience.EventRejected, Err: err})
		}
	case c.p.cfg.waitOpen: // a call whose retries the breaker stopped waits too
		rejected = breaker.IsRejection(err)
	}
	return res, rejected, err
}

// inside runs the rest of the call once the breaker admitted it, and
// leaves its result in c.res. A probe by a call that waited for the
// breaker, which the call's own deadline ended, is no evidence against the
// dependency: the call spent its time waiting, and the breaker does not
// count it (it lets the next waiter probe).
func (c *call[T]) inside(ctx context.Context) (err error) {
	c.ran = true
	if c.p.cfg.budget > 0 && c.p.cfg.budgetBehindBreaker() {
		var end *lazyCtx
		if ctx, end = c.withBudget(ctx); end != nil {
			defer end.end()
		}
	}
	c.res, err = c.retry(ctx)
	if c.budgeted {
		ownBudget(err)
	}
	if err != nil && c.probe && c.opts.waited && deadlinePassed(ctx) && !errors.Is(err, ErrAttemptTimeout) {
		err = &waitedOut{err}
	}
	if c.sentAt != 0 && err == nil {
		err = &sendtime.Success{At: c.sentAt} // the breaker times the answer from its attempt's sending
	}
	return err
}

// waitedOut is the error of a probe that a call which waited for the
// breaker ran out of time in: of class [resilience.ClassRejected] for the
// breaker, and its cause for the caller.
type waitedOut struct{ err error }

func (w *waitedOut) Error() string                   { return w.err.Error() }
func (w *waitedOut) Unwrap() error                   { return w.err }
func (*waitedOut) ResilienceClass() resilience.Class { return resilience.ClassRejected }

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
		if re, ok := err.(*retrypolicy.Error); ok && breaker.IsRejection(re.Reason) {
			c.stopped = re // its retries stopped: they go on from there (retrypolicy.Resume)
		}
		c.refused = nil
		res, rejected, err = c.through(ctx, b)
	}
	return res, err
}

// retry runs attempts until one succeeds or the policy gives up; the
// breaker's check stops it between attempts. A probe of a breaker not
// closed makes one attempt. Each attempt starts at the first of the
// stages inside this one that does something for it.
func (c *call[T]) retry(ctx context.Context) (T, error) {
	c.probe = c.b.Check() != nil
	if c.p.cfg.retry == nil || c.opts.single || c.probe {
		return c.once(ctx)
	}
	var guard func() error // a method value here, where it does not escape
	if c.b != nil {
		guard = c.guard
	}
	via := c.firstInside()
	if c.stopped != nil {
		return c.resume(ctx, guard, via)
	}
	if c.b != nil {
		c.via, c.n = via, 0
		return retrypolicy.DoGuarded(ctx, c.p.cfg.retry, guard, c.stamped)
	}
	if c.attempts {
		c.via, c.n = via, 0
		return retrypolicy.DoGuarded(ctx, c.p.cfg.retry, guard, c.told)
	}
	switch via {
	case viaHedge:
		return retrypolicy.DoGuarded(ctx, c.p.cfg.retry, guard, c.hedge)
	case viaTimeout:
		return retrypolicy.DoGuarded(ctx, c.p.cfg.retry, guard, c.timeout)
	}
	return retrypolicy.DoGuarded(ctx, c.p.cfg.retry, guard, c.op)
}

// stamped runs an attempt of the retry stage of a call through a breaker
// from stage c.via (as told, if the listener wants attempts). A retry is
// noted as sent now, well after the breaker admitted the call: the
// breaker times the dependency's answer, if a success, from then
// (package sendtime).
func (c *call[T]) stamped(ctx context.Context) (T, error) {
	if c.tries++; c.tries > 1 {
		c.sentAt = monotime.Now()
	}
	switch {
	case c.attempts:
		return c.told(ctx)
	case c.via == viaOp:
		return c.op(ctx) // the retry stage takes an error that wraps itself apart, as invoke
	}
	return c.from(ctx, c.via)
}

// unsent reports whether err, an attempt's, is the breaker's refusal of
// it as it was about to be sent (it opened again as the attempt waited for
// a slot): an attempt not made, neither counted nor told.
func (c *call[T]) unsent(err error) bool { return err != nil && err == c.refused }

// guard is the retry stage's check between attempts: the breaker's, or
// its refusal of the attempt just made, which was then not sent.
func (c *call[T]) guard() error {
	if c.refused != nil {
		return c.refused
	}
	return c.b.Check()
}

// resume goes on with the retry stage's attempts for a call that waited
// out the breaker that stopped them, within the same most attempts, each
// from stage via.
func (c *call[T]) resume(ctx context.Context, guard func() error, via int8) (T, error) {
	c.via, c.n = via, c.made() // a call that waited has a breaker: its retries are stamped
	return retrypolicy.Resume(ctx, c.p.cfg.retry, guard, c.stopped, c.stamped)
}

// made returns the attempts the retry stage made before the breaker
// stopped it, for a call that waited since; 0 for any other.
func (c *call[T]) made() int {
	if c.stopped == nil {
		return 0
	}
	return c.stopped.Attempts
}

// told runs an attempt of the retry stage, from the stage retry chose for
// them all, and tells the listener, which wants it, of the attempt,
// numbered as the retry stage numbers it. The pipeline asks the listener
// once, as the call starts, whether it wants attempts; the retry stage,
// which counts them, neither asks nor tells
// (safe.Listener.TellsNoAttempts).
func (c *call[T]) told(ctx context.Context) (T, error) {
	returned := false
	defer func() {
		if !returned { // a panic or runtime.Goexit: a failed attempt, as the retry stage counts it
			c.n++
			c.p.cfg.listener.Attempted(c.n, errPanicked)
		}
	}()
	res, err := c.from(ctx, c.via)
	returned = true
	told, _ := classify.Sent(err) // the mark is the retry stage's
	if c.unsent(told) {
		return res, err
	}
	c.n++
	c.p.cfg.listener.Attempted(c.n, told)
	return res, err
}

// The stage an attempt starts at, inside the retry stage.
const (
	viaOp      int8 = iota // the operation: no stage does anything for it
	viaHedge               // hedge and attempt: hedging, a gate, or the tracer (which need c.s)
	viaTimeout             // the attempt timeout
)

// from runs an attempt from stage via.
func (c *call[T]) from(ctx context.Context, via int8) (T, error) {
	switch via {
	case viaHedge:
		return c.hedge(ctx)
	case viaTimeout:
		return c.timeout(ctx)
	}
	return c.invoke(ctx)
}

// invoke runs the operation once. An error whose tree does not end (one
// that wraps itself) becomes one that wraps nothing, so that the stages
// that classify it return (resilience.Acyclic).
func (c *call[T]) invoke(ctx context.Context) (T, error) {
	res, err := c.op(ctx)
	if err != nil {
		err = resilience.Acyclic(err)
	}
	return res, err
}

// firstInside returns the first of the stages inside the retry stage that
// does something for an attempt: each attempt starts there.
func (c *call[T]) firstInside() int8 {
	if c.s != nil || !c.noGate() {
		return viaHedge
	}
	if c.p.cfg.attemptTimeout > 0 {
		return viaTimeout
	}
	return viaOp
}

// noGate reports whether no gate admits the call's attempts: there is
// none, or only WaitWhenOpen's pacer while it paces nothing (no call
// waits, and this one did not), in which case a call that comes then
// stays out of it to the end.
func (c *call[T]) noGate() bool {
	cfg := &c.p.cfg
	return len(cfg.gates) == 0 || len(cfg.gates) == 1 && cfg.pacer != nil && !c.opts.waited && cfg.pacer.backlog.Load() == 0
}

// once runs the only attempt of a call that is not retried, and reports
// it as the retry stage would.
func (c *call[T]) once(ctx context.Context) (res T, err error) {
	if ctx.Err() != nil { // out of time or canceled before anything was sent, as the retry stage checks
		return res, c.p.outOfTime(ctx, 0, nil)
	}
	l := c.p.cfg.listener
	n := c.made() + 1 // a probe by a call whose retries the breaker stopped goes on from them
	returned := false
	defer func() {
		if !returned { // a panic or runtime.Goexit: a failed attempt, as the retry stage counts it
			l.Count(n, errPanicked)
			if c.attempts {
				l.Attempted(n, errPanicked)
			}
		}
	}()
	res, err = c.from(ctx, c.firstInside())
	returned = true
	err, _ = classify.Sent(err) // no retry stage to tell
	if c.unsent(err) {
		return res, err
	}
	l.Count(n, err)
	if c.attempts {
		l.Attempted(n, err)
	}
	if err != nil && (ctx.Err() != nil || retryable(err) && deadlinePassed(ctx)) { // an answer not retried stands, as in the retry stage
		err = c.p.outOfTime(ctx, 1, err)
	} else if err != nil && c.p.cfg.retry != nil && (c.opts.single && classify.Holds(c.p.cfg.retry.WouldRetry, err) || classify.Holds(resilience.IsUnrepeatable, err)) {
		l.Emit(resilience.Event{Kind: resilience.EventNotRetried, Attempt: 1, Err: err})
	}
	return res, err
}

// hedge runs one attempt of the retry stage, as a race of hedges if the
// pipeline hedges and the call may be repeated.
func (c *call[T]) hedge(ctx context.Context) (T, error) {
	if h := c.p.cfg.hedge; h != nil && !c.probe && !c.opts.single && !c.opts.sequential {
		if d, ok := h.After(); ok {
			r := newRace(c, ctx, d)
			res, err := r.run()
			c.hedged = c.hedged || r.closeSends() > 0
			if !r.alone {
				c.s.raced(err)
			}
			c.shared = c.shared || !r.alone
			c.refused = r.refused
			return res, c.markHedged(err)
		}
	}
	res, err := c.attempt(ctx, false, nil)
	return res, c.markHedged(err)
}

// markHedged returns err said to be of a call that sent a hedge (Hedged),
// if an attempt of c did.
func (c *call[T]) markHedged(err error) error {
	if err != nil && c.hedged {
		err, sent := classify.Sent(err) // the retry stage's mark stays outermost
		if !sent {
			return classify.Unsent(&hedgedError{err})
		}
		return &hedgedError{err}
	}
	return err
}

// attempt sends one attempt if the gates admit it; r, if not nil, is the
// race it is an attempt of: its first attempt arms it once the gates have
// admitted it, as it is sent; a hedge admitted once the race was decided
// is not sent. The gates learn how it ended.
func (c *call[T]) attempt(ctx context.Context, hedge bool, r *race[T]) (res T, err error) {
	if c.s == nil && c.noGate() {
		return c.timeout(ctx)
	}
	gates := c.p.cfg.gates
	held, refusal, err := acquire(ctx, gates, c.opts.waited, hedge, c.probe)
	if err == nil && hedge && (ctx.Err() != nil || passed(ctx) || r.closed()) {
		release(gates, held, errNotSent) // its slot came as its race was decided: not sent
		return res, errUnsent
	}
	if err == nil {
		if err = c.reopened(); err != nil {
			release(gates, held, errNotSent) // not sent
			refusal = resilience.EventRejected
			if !hedge {
				c.refused = err
			}
		}
	}
	if err != nil {
		if !hedge { // a hedge not sent is no refusal of its call, which goes on with the attempt out
			n := 0 // EventRejected: the breaker rejected the call, as at its door: not a stop between retries
			if refusal != resilience.EventRejected {
				n = c.s.next()
			}
			c.p.cfg.listener.Emit(resilience.Event{Kind: refusal, Attempt: n, Err: err})
			err = classify.Unsent(err) // for the retry loop: the quota's charge goes back (review160)
		}
		return res, err
	}
	info := c.s.start(hedge) // numbered as it is sent: an attempt refused at the gates takes no number
	var armed monotime.Reading
	if r != nil && !hedge && !c.s.traced() {
		armed = r.arm() // as sent would after the span, which there is none of: here it costs less
	}
	return c.sent(ctx, info, held, r, armed)
}

// reopened asks the breaker again once the gates have admitted an
// attempt, which may have waited for a slot meanwhile: if it has opened
// since it admitted the call (or, for a probe, opened again), the attempt
// is not sent, and fails with its rejection, of class
// [resilience.ClassRejected]: not retried, not counted, and, with
// WaitWhenOpen, waited out again.
func (c *call[T]) reopened() error {
	if c.b == nil {
		return nil
	}
	if c.probe && c.b.State() != resilience.StateOpen {
		return nil
	}
	if err := c.b.Check(); err != nil {
		return resilience.Rejected(err)
	}
	return nil
}

// spanned starts an admitted attempt's span if the call is traced; ok is
// false for a hedge admitted as its call returned, which is then not sent
// and gives its slot back.
func (c *call[T]) spanned(ctx context.Context, info resilience.AttemptInfo, held tickets) (_ context.Context, end func(error), ok bool) {
	if !c.s.traced() {
		return ctx, nil, true
	}
	started := false
	defer func() {
		if !started || !ok { // not sent: a span refused, or a tracer that called runtime.Goexit
			release(c.p.cfg.gates, held, errNotSent)
		}
	}()
	ctx, end, ok = c.s.span(ctx, info)
	started = true
	return ctx, end, ok
}

// sent runs an admitted attempt, with its span if the call is traced, and
// gives its outcome to the gates, the tracer and the hedging policy.
func (c *call[T]) sent(ctx context.Context, info resilience.AttemptInfo, held tickets, r *race[T], armed monotime.Reading) (res T, err error) {
	ctx, end, ok := c.spanned(ctx, info, held)
	if !ok {
		return res, context.Canceled
	}
	if c.late(r, info, held, end) {
		return res, errUnsent
	}
	returned := false
	defer func() { c.attemptEnded(ctx, err, returned, held, end) }() // first: a listener that calls runtime.Goexit as racing reports a hedge must not keep the slots
	armed = c.racing(r, info, armed)
	if info.Hedge && c.moot(r) { // decided, or the breaker opened, as a listener heard of it: counted (Hedged says so), not sent
		returned = true
		return res, errUnsent
	}
	start, learns := armed, c.p.cfg.hedge.Learns() // a first attempt's race was armed just now: one clock read less
	if learns && (r == nil || info.Hedge) {
		start = monotime.Now()
	}
	res, err = c.timeout(ctx)
	returned = true
	if r != nil {
		r.returned(info.Hedge, err)
	}
	if learns && !ofClass(err, resilience.ClassRejected) {
		// Every attempt's latency, a loser's too: cut short by the
		// winner, it is a lower bound, and without it the slow tail
		// that hedging cuts would be left out of the quantile. Not one
		// that ended with an error of class rejected, refused on the
		// caller's side: by its operation (httpclient's hedge while the
		// first attempt reads a streamed body), or an inner pipeline's
		// gates (review124).
		c.p.cfg.hedge.Observe(monotime.Since(start))
	}
	return res, err
}

// late reports whether an attempt is a hedge whose race returned or was
// decided, or whose breaker opened, as it was admitted or its span started
// (review138), which is then not sent: it gives its slots back and ends
// its span.
func (c *call[T]) late(r *race[T], info resilience.AttemptInfo, held tickets, end func(error)) bool {
	if !info.Hedge {
		return false
	}
	if r.sendHedge() {
		if !c.moot(r) {
			return false
		}
		r.unsend() // decided, or the breaker opened, as it was admitted: not counted
	}
	release(c.p.cfg.gates, held, errNotSent)
	if end != nil {
		safe.EndAttempt(end, context.Canceled)
	}
	return true
}

// moot reports whether a hedge of race r is no longer worth sending: r
// was decided, its first attempt failed with no other hedge out, or the
// breaker opened.
func (c *call[T]) moot(r *race[T]) bool { return r.closed() || r.lone() || c.reopened() != nil }

// racing tells r, if not nil, that an attempt of its is being sent, its
// span started: the first starts the hedging delay, as the operation is
// called (not while the gates or the tracer held it up, which the
// latencies the policy learns leave out too); a hedge is reported. It
// returns the clock's reading as it armed r, or armed, attempt's.
func (c *call[T]) racing(r *race[T], info resilience.AttemptInfo, armed monotime.Reading) monotime.Reading {
	switch {
	case r == nil:
	case info.Hedge: // counted in r.sent (sendHedge)
		c.hedged = true
		c.p.cfg.listener.Emit(resilience.Event{Kind: resilience.EventHedged, Attempt: int(c.k.hedge), Delay: r.delay})
	case c.s.traced(): // else attempt armed it
		return r.arm()
	}
	return armed
}

// attemptEnded gives the outcome of an attempt that ended with err to the
// gates, its span (end, if not nil) and the call's state. One whose
// operation panicked or called runtime.Goexit (returned false) teaches the
// gates nothing: the caller's bug says nothing of the dependency's load.
// Nor does one that the caller's deadline ended: a budget too short for
// an answer is the caller's doing (grpc-go's retry throttling does not
// count a deadline either), whether or not ctx has heard of it yet: a
// client that makes the deadline a socket's (a driver, go-redis, a
// dialer) answers "i/o timeout" as the context's timer fires, often
// first. The pipeline's own limits, the attempt timeout and the time
// budget, teach them as failures.
func (c *call[T]) attemptEnded(ctx context.Context, err error, returned bool, held tickets, end func(error)) {
	outcome := attemptOutcome(ctx, err, returned)
	learned := outcome
	switch {
	case err == errUnsent && returned: // a hedge moot as it was reported: not sent (review163)
		learned = errNotSent
	case !returned || err != nil && !c.budgeted && deadlinePassed(ctx):
		learned = context.Canceled
	}
	release(c.p.cfg.gates, held, learned)
	if end != nil {
		safe.EndAttempt(end, outcome)
	}
	c.s.ended(outcome)
}

// deadlinePassed reports whether ctx's deadline has passed, by ctx or by
// the clock.
func deadlinePassed(ctx context.Context) bool {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
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
		return c.invoke(ctx)
	}
	lc := c.attemptCtx(ctx, d)
	if c.k == nil {
		defer lc.end()
	} else {
		prev := c.k.attempt
		c.k.attempt = lc.end
		if prev != nil {
			// The attempt before this one is over once this one has ended:
			// until then op may still read what it left, such as an error
			// body to drain so that its connection is reused.
			defer prev()
		}
	}
	ctx = lc
	res, err := c.invoke(ctx)
	if err != nil {
		err = timedOut(ctx, d, err)
	}
	return res, err
}

// attemptCtx returns ctx capped at the attempt timeout d: the context and
// clock reading the budget left to the first attempt, or its own.
func (c *call[T]) attemptCtx(ctx context.Context, d time.Duration) *lazyCtx {
	lc, now := c.spare, c.now
	c.spare = nil
	if lc == nil || !c.p.cfg.attemptFollows {
		now = monotime.Now()
	}
	if lc == nil {
		lc = new(lazyCtx)
	}
	lc.set(ctx, now, d, true)
	return lc
}

// timedOut names the attempt timeout in err if it is what ended the
// attempt: err is the bare context error (as most operations return it)
// and the attempt's own deadline passed, not the caller's or the budget's.
func timedOut(ctx context.Context, d time.Duration, err error) error {
	if context.Cause(ctx) != ErrAttemptTimeout || !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrAttemptTimeout) {
		return err
	}
	return &attemptTimeoutError{d: d, errs: [2]error{ErrAttemptTimeout, err}}
}

// attemptTimeoutError is an attempt cut short by the attempt timeout. It
// matches ErrAttemptTimeout and whatever the operation returned
// ([context.DeadlineExceeded]).
type attemptTimeoutError struct {
	d    time.Duration
	errs [2]error // ErrAttemptTimeout, then what the operation returned
}

func (e *attemptTimeoutError) Error() string {
	return "attempt timeout (" + e.d.String() + ") exceeded: " + e.errs[1].Error()
}

func (e *attemptTimeoutError) Unwrap() []error { return e.errs[:] } // no allocation per unwrap

// retryable reports whether err's class is retried; an error whose
// methods panic as it is classified is taken for one (it stops nothing).
func retryable(err error) bool {
	c, ok := classify.Safely(err)
	return !ok || c.Retryable()
}
