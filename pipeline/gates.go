package pipeline

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"

	"github.com/resiliencekit/resiliencekit/internal/classify"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/throttle"
)

// gate is a stage that decides whether an attempt may be sent, and learns
// how it ended: the throttle, the concurrency limit and the pacer of
// WaitWhenOpen. New puts the configured ones in config.gates, in stage
// order; an attempt passes them all before it is sent.
type gate interface {
	// acquire admits an attempt, with a ticket for release (0 if it holds
	// nothing to give back), or refuses it with an error of class
	// [resilience.ClassRejected]. waited says whether the attempt's call
	// waited for the breaker, hedge whether the attempt is a hedge, probe
	// whether it is a probe of a breaker not closed.
	acquire(ctx context.Context, waited, hedge, probe bool) (ticket uint64, err error)
	// release gives back what acquire took, with the attempt's outcome:
	// nil, its error, or context.Canceled for an attempt that was not
	// sent or was abandoned, which teaches nothing.
	release(ticket uint64, outcome error)
	// refusal is the kind of event that reports a refusal.
	refusal() resilience.EventKind
}

// maxGates is the most gates a pipeline has, one of each kind: an attempt
// keeps their tickets in an array of this size, on its stack.
const maxGates = 3

// tickets are an attempt's tickets, one a gate, in the order of the gates.
type tickets [maxGates]uint64

// buildGates returns the gates that c configures, in stage order.
func (c *config) buildGates() []gate {
	var gs []gate
	if c.waitOpen && c.breaker != nil {
		// First: an attempt of the backlog queues here before it takes a
		// throttle's count or a slot of the limit, which it would hold
		// unsent. Halving once a round trip, as TCP does, sheds a backlog
		// that overshoots a dependency coming back within a few round
		// trips.
		c.pacer = &pacer{limit: limit.NewAIMD(limit.MaxWaiting(math.MaxInt), limit.Backoff(0.5), limit.OldestOnTime())}
		gs = append(gs, c.pacer)
	}
	if c.throttle != nil {
		gs = append(gs, throttleGate{c.throttle})
	}
	if c.limit != nil {
		gs = append(gs, limitGate{c.limit})
	}
	if len(gs) > maxGates {
		panic("pipeline: more gates than maxGates")
	}
	return gs
}

// acquire passes an attempt through gs: nil with their tickets, or the
// first refusal, with its kind, after giving back what it held.
func acquire(ctx context.Context, gs []gate, waited, hedge, probe bool) (held tickets, kind resilience.EventKind, err error) {
	for i, g := range gs {
		tk, err := g.acquire(ctx, waited, hedge, probe)
		if err != nil {
			release(gs, held, errNotSent) // nothing learned
			return tickets{}, g.refusal(), err
		}
		held[i] = tk
	}
	return held, 0, nil
}

// release gives back the gates of gs that held tickets for, innermost
// first.
func release(gs []gate, held tickets, outcome error) {
	for i := len(gs) - 1; i >= 0; i-- {
		if held[i] != 0 {
			gs[i].release(held[i], outcome)
		}
	}
}

// throttleGate is the client-side throttle (WithThrottle). A probe of a
// breaker not closed passes it, uncounted: the breaker already holds the
// dependency's load to its probes, and a throttle that refused them, its
// window still full of the outage's failures, kept the breaker from
// closing and then refused the calls of a dependency back (review102).
type throttleGate struct{ t *throttle.Throttle }

func (g throttleGate) acquire(_ context.Context, _, _, probe bool) (uint64, error) {
	if probe {
		return 0, nil
	}
	tk, err := g.t.Admit()
	return uint64(tk), err
}

func (g throttleGate) release(tk uint64, outcome error) { g.t.Done(throttle.Ticket(tk), outcome) }
func (throttleGate) refusal() resilience.EventKind      { return resilience.EventThrottled }

// limitGate is the concurrency limit (WithLimit). A hedge takes a slot
// only from the half of the limit that is free, or is refused, and an
// attempt that finds the limit full takes a hedge's slot, the hedge
// stopped ([limit.Limiter.AcquireExtra]): it does not queue, where it
// would take the place of a call's first attempt, and go ahead of those
// queued after it, for an attempt that its call may not need, nor keep a
// slot that another call's attempt needs.
type limitGate struct{ l *limit.Limiter }

func (g limitGate) acquire(ctx context.Context, _, hedge, _ bool) (uint64, error) {
	if hedge {
		tk, err := g.l.AcquireExtra(yieldOf(ctx))
		return uint64(tk), err
	}
	tk, err := g.l.Acquire(ctx)
	return uint64(tk), err
}

func (g limitGate) release(tk uint64, outcome error) { g.l.Release(limit.Ticket(tk), outcome) }
func (limitGate) refusal() resilience.EventKind      { return resilience.EventLimited }

// yielder stops a hedge whose slot a gate gave to another call's attempt
// ([limit.Limiter.AcquireExtra]): its context is canceled, and its
// outcome, unless a success, is a refusal (errYielded), not its answer.
type yielder struct {
	yielded atomic.Bool
	cancel  context.CancelFunc
}

func (y *yielder) stop() {
	y.yielded.Store(true)
	y.cancel()
}

// yieldKey marks a hedge's context with its yielder.
type yieldKey struct{}

// yieldOf returns what stops the hedge of ctx, nil if none.
func yieldOf(ctx context.Context) func() {
	if y, ok := ctx.Value(yieldKey{}).(*yielder); ok {
		return y.stop
	}
	return nil
}

// errNotSent is what the gates are told of an attempt they admitted and
// that was not sent after all (a later gate refused it, its race was
// decided, its span refused): canceled, for what they learn, and marked
// for the throttle, which then owes its bucket the probe it took
// (review160), where an attempt that was sent and then canceled does not
// (review162: a probe a call's deadline ended made the next one a probe,
// one a deadline at a hanging dependency).
var errNotSent = classify.Unsent(context.Canceled)

// errYielded is the outcome of a hedge that gave its slot to another
// call's attempt and failed: refused on this side, as if not sent, for
// the race; what the dependency answered it, if anything, is no answer.
var errYielded = fmt.Errorf("pipeline: a hedge gave its slot to another call's attempt: %w", limit.ErrLimited)

// pacer paces the backlog of calls that waited for the breaker
// (WaitWhenOpen): their attempts go through an adaptive limit of the
// pipeline's own, queued, so that the backlog goes no faster than the
// dependency answers. Other attempts never wait for it: while a call that
// waited is not over, each takes a slot at once, past the limit if need
// be, so that the backlog is paced by the whole load on the dependency and
// the limit learns from every answer; with nothing waiting, it admits at
// once and holds nothing. A hedge of a call that waited takes a slot from
// the free half or is refused, as at the concurrency limit.
type pacer struct {
	limit   *limit.Limiter
	backlog atomic.Int64 // calls that waited, not yet over
}

func (p *pacer) acquire(ctx context.Context, waited, hedge, _ bool) (uint64, error) {
	if !waited {
		if p.backlog.Load() == 0 {
			return 0, nil
		}
		return uint64(p.limit.Enter()), nil
	}
	if hedge { // as at the limit (limitGate): queued, it would outlast its twin's answer
		tk, err := p.limit.AcquireExtra(yieldOf(ctx))
		return uint64(tk), err
	}
	tk, err := p.limit.Acquire(ctx)
	return uint64(tk), err
}

func (p *pacer) release(tk uint64, outcome error) { p.limit.Release(limit.Ticket(tk), outcome) }
func (*pacer) refusal() resilience.EventKind      { return resilience.EventLimited }
