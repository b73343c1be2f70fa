package pipeline

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/throttle"
)

// TestPacerCountsCallsThatNeverWaited: while a call that waited is out,
// the attempts of calls that never waited take the pacer's slots without
// waiting, past its limit, and the backlog waits behind them; with
// nothing waiting they hold nothing.
func TestPacerCountsCallsThatNeverWaited(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &pacer{limit: limit.NewAIMD(limit.Initial(2), limit.MaxWaiting(10))}
		tk, err := p.acquire(t.Context(), false, false, false)
		require.NoError(t, err)
		assert.Zero(t, tk, "nothing waits: nothing held")

		p.backlog.Add(1)
		var held []uint64
		for range 3 {
			tk, err := p.acquire(t.Context(), false, false, false)
			require.NoError(t, err)
			require.NotZero(t, tk, "counted")
			held = append(held, tk)
		}
		assert.Equal(t, 3, p.limit.InFlight(), "past the limit of 2, without waiting")

		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
		defer cancel()
		_, err = p.acquire(ctx, true, false, false)
		require.ErrorIs(t, err, limit.ErrLimited, "the call that waited waits behind them")
		for _, tk := range held {
			p.release(tk, nil)
		}
		tk, err = p.acquire(t.Context(), true, false, false)
		require.NoError(t, err)
		p.release(tk, nil)
	})
}

// TestAllGatesTogether: a pipeline may have every gate at once, in stage
// order.
func TestAllGatesTogether(t *testing.T) {
	p := New(WithThrottle(throttle.New()), WithLimit(limit.NewFixed(1)), WithBreaker(breaker.New("dep")), WaitWhenOpen())
	require.Len(t, p.cfg.gates, maxGates)
	assert.Equal(t, p.cfg.pacer, p.cfg.gates[0], "the backlog queues before it takes a throttle's count or a limit's slot")
	assert.IsType(t, throttleGate{}, p.cfg.gates[1])
	assert.IsType(t, limitGate{}, p.cfg.gates[2])
}

// TestBacklogEndsWithTheCallsThatWaited: a call that waited for the
// breaker is in the pacer's backlog until it is over, and no longer.
func TestBacklogEndsWithTheCallsThatWaited(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("dep", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(100*time.Millisecond))
		p := New(WithBreaker(b), WaitWhenOpen())
		_, _ = Do(t.Context(), p, func(context.Context) (int, error) { return 0, errors.New("503") })
		var during int64
		_, err := Do(t.Context(), p, func(context.Context) (int, error) { during = p.cfg.pacer.backlog.Load(); return 1, nil })
		require.NoError(t, err)
		assert.EqualValues(t, 1, during, "the call waited: it is the backlog")
		assert.Zero(t, p.cfg.pacer.backlog.Load(), "and is out of it once over")
	})
}

// TestIdlePacerLeavesTheOtherGates: beside WaitWhenOpen with nothing
// waiting, the other gates still admit each attempt.
func TestIdlePacerLeavesTheOtherGates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := New(WithLimit(limit.NewFixed(1)), WithBreaker(breaker.New("dep")), WaitWhenOpen())
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = Do(t.Context(), p, func(context.Context) (int, error) { time.Sleep(time.Second); return 1, nil })
		}()
		synctest.Wait()
		_, err := Do(t.Context(), p, func(context.Context) (int, error) { return 1, nil })
		require.ErrorIs(t, err, limit.ErrLimited, "the limit of 1 is full")
		<-done
	})
}

// TestCallsThatNeverWaitedCountInTheBacklogsPacer: while a call that
// waited is out, a call that did not takes a slot of the pacer too.
func TestCallsThatNeverWaitedCountInTheBacklogsPacer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("dep", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(100*time.Millisecond))
		p := New(WithBreaker(b), WaitWhenOpen())
		_, _ = Do(t.Context(), p, func(context.Context) (int, error) { return 0, errors.New("503") })
		var n atomic.Int64
		probeThenSlow := func(context.Context) (int, error) {
			if n.Add(1) > 1 {
				time.Sleep(time.Second)
			}
			return 1, nil
		}
		var wg sync.WaitGroup
		defer wg.Wait()
		for range 2 { // both wait; one probes at 100 ms, the other is then out for a second
			wg.Go(func() { _, _ = Do(t.Context(), p, probeThenSlow) })
		}
		time.Sleep(200 * time.Millisecond)
		require.Equal(t, resilience.StateClosed, b.State())
		require.EqualValues(t, 1, p.cfg.pacer.backlog.Load())
		var inFlight int
		_, err := Do(t.Context(), p, func(context.Context) (int, error) { inFlight = p.cfg.pacer.limit.InFlight(); return 1, nil })
		require.NoError(t, err)
		assert.Equal(t, 2, inFlight, "the call that waited, and this one")
	})
}

// fakeGate admits or refuses, and records what it is given back.
type fakeGate struct {
	refuse   bool
	released []error
}

func (g *fakeGate) acquire(context.Context, bool, bool, bool) (uint64, error) {
	if g.refuse {
		return 0, limit.ErrLimited
	}
	return 7, nil
}

func (g *fakeGate) release(tk uint64, outcome error) {
	if tk == 7 {
		g.released = append(g.released, outcome)
	}
}

func (*fakeGate) refusal() resilience.EventKind { return resilience.EventLimited }

// TestARefusalGivesBackWhatTheGatesBeforeHeld: when a gate refuses an
// attempt, the gates before it, which admitted it, get their tickets back
// as for an attempt not sent; the one that refused, and those after it,
// hold nothing.
func TestARefusalGivesBackWhatTheGatesBeforeHeld(t *testing.T) {
	first, second, third := &fakeGate{}, &fakeGate{refuse: true}, &fakeGate{}
	held, kind, err := acquire(t.Context(), []gate{first, second, third}, false, false, false)
	require.ErrorIs(t, err, limit.ErrLimited)
	assert.Equal(t, resilience.EventLimited, kind)
	assert.Equal(t, tickets{}, held)
	assert.Equal(t, []error{errNotSent}, first.released, "given back, as not sent")
	assert.Empty(t, third.released)
}
