package pipeline

import (
	"context"
	"math"
	"sync/atomic"

	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/throttle"
)

// gate is a stage that decides whether an attempt may be sent, and learns
// how it ended: the throttle, the concurrency limit and the pacer of
// WaitWhenOpen. New puts the configured ones in config.gates, in stage
// order; an attempt passes them all before it is sent.
type gate interface {
	// acquire admits an attempt, or refuses it with an error of class
	// [resilience.ClassRejected]. held reports whether the attempt took
	// something that release must give back. waited says whether the
	// attempt's call waited for the breaker.
	acquire(ctx context.Context, waited bool) (held bool, err error)
	// release gives back what acquire took, with the attempt's outcome:
	// nil, its error, or context.Canceled for an attempt that was not
	// sent or was abandoned, which teaches nothing.
	release(outcome error)
	// refusal is the kind of event that reports a refusal.
	refusal() resilience.EventKind
}

// buildGates returns the gates that c configures, in stage order.
func (c *config) buildGates() []gate {
	var gs []gate
	if c.throttle != nil {
		gs = append(gs, throttleGate{c.throttle})
	}
	if c.limit != nil {
		gs = append(gs, limitGate{c.limit})
	}
	if c.waitOpen && c.breaker != nil {
		c.pacer = &pacer{limit: limit.NewAIMD(limit.MaxWaiting(math.MaxInt))}
		gs = append(gs, c.pacer)
	}
	return gs
}

// acquire passes an attempt through gs: nil with the gates it holds (a bit
// each, in the order of gs: 32 at most), or
// the first refusal, with its kind, after giving back what it held.
func acquire(ctx context.Context, gs []gate, waited bool) (held uint32, kind resilience.EventKind, err error) {
	for i, g := range gs {
		h, err := g.acquire(ctx, waited)
		if err != nil {
			release(gs, held, context.Canceled) // not sent: nothing learned
			return 0, g.refusal(), err
		}
		if h {
			held |= 1 << i
		}
	}
	return held, 0, nil
}

// release gives back the gates of gs that held marks, innermost first.
func release(gs []gate, held uint32, outcome error) {
	for i := len(gs) - 1; i >= 0; i-- {
		if held&(1<<i) != 0 {
			gs[i].release(outcome)
		}
	}
}

// throttleGate is the client-side throttle (WithThrottle).
type throttleGate struct{ t *throttle.Throttle }

func (g throttleGate) acquire(context.Context, bool) (bool, error) { return true, g.t.Admit() }
func (g throttleGate) release(outcome error)                       { g.t.Done(outcome) }
func (throttleGate) refusal() resilience.EventKind                 { return resilience.EventThrottled }

// limitGate is the concurrency limit (WithLimit).
type limitGate struct{ l *limit.Limiter }

func (g limitGate) acquire(ctx context.Context, _ bool) (bool, error) { return true, g.l.Acquire(ctx) }
func (g limitGate) release(outcome error)                             { g.l.Release(outcome) }
func (limitGate) refusal() resilience.EventKind                       { return resilience.EventLimited }

// pacer paces the backlog of calls that waited for the breaker
// (WaitWhenOpen): while any of them is not over, every attempt goes
// through an adaptive limit of the pipeline's own, so that the backlog,
// and what comes with it, goes no faster than the dependency answers.
// With nothing waiting, it admits at once and holds nothing.
type pacer struct {
	limit   *limit.Limiter
	backlog atomic.Int64 // calls that waited, not yet over
}

func (p *pacer) acquire(ctx context.Context, waited bool) (bool, error) {
	if !waited && p.backlog.Load() == 0 {
		return false, nil
	}
	return true, p.limit.Acquire(ctx)
}

func (p *pacer) release(outcome error)       { p.limit.Release(outcome) }
func (*pacer) refusal() resilience.EventKind { return resilience.EventLimited }
