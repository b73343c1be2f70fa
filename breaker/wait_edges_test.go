package breaker_test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// waitedUntil runs Wait in a goroutine and returns where its result and
// when it came (since start) will be.
func waitedUntil(ctx context.Context, b *breaker.Breaker, rejection error, start time.Time) (<-chan error, *atomic.Int64) {
	done := make(chan error, 1)
	var when atomic.Int64
	go func() {
		err := b.Wait(ctx, rejection)
		when.Store(int64(time.Since(start)))
		done <- err
	}()
	return done, &when
}

// busyHalfOpen returns a breaker (FlushInterval 100 ms) half-open since
// just now, whose probe runs until release is closed, and the rejection
// of a call meanwhile.
func busyHalfOpen(t *testing.T) (b *breaker.Breaker, busy error, release chan struct{}) {
	b = breaker.New("dep", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(time.Second), breaker.FlushInterval(100*time.Millisecond))
	calls(b, 1, failed)
	time.Sleep(time.Second + time.Nanosecond)
	release = make(chan struct{})
	go func() { _ = b.Execute(t.Context(), func(context.Context) error { <-release; return nil }) }()
	synctest.Wait()
	busy = b.Execute(t.Context(), ok)
	require.ErrorIs(t, busy, breaker.ErrTooManyRequests)
	return b, busy, release
}

// TestHalfOpenQueueLetsOneGoEachFlushInterval: while a half-open
// breaker's probe runs long, its queue lets its oldest waiter go a flush
// interval after the last release, or after the first waiter came: one at
// 100 ms after the first came, the next 100 ms later, whenever the others
// came.
func TestHalfOpenQueueLetsOneGoEachFlushInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, busy, release := busyHalfOpen(t)
		start := time.Now()
		first, firstAt := waitedUntil(t.Context(), b, busy, start)
		time.Sleep(50 * time.Millisecond)
		second, secondAt := waitedUntil(t.Context(), b, busy, start)
		require.NoError(t, <-first)
		require.NoError(t, <-second)
		assert.Equal(t, 100*time.Millisecond, time.Duration(firstAt.Load()))
		assert.Equal(t, 200*time.Millisecond, time.Duration(secondAt.Load()))
		close(release)
	})
}

// TestCanceledWaiterKeepsTheOrder: a waiter behind another gives up: the
// one ahead is still the probe when the breaker turns half-open, and
// neither is rejected again.
func TestCanceledWaiterKeepsTheOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rej := &rejections{}
		b := breaker.New("dep", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(time.Second), breaker.WithListener(rej))
		calls(b, 1, failed)
		start := time.Now()
		var ran atomic.Int64
		done := make(chan error, 2)
		go func() {
			done <- waitAndRun(t.Context(), b, func(context.Context) error { ran.Store(int64(time.Since(start))); return nil })
		}()
		time.Sleep(time.Millisecond)
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(500*time.Millisecond, cancel)
		go func() { done <- waitAndRun(ctx, b, ok) }()
		require.ErrorIs(t, <-done, breaker.ErrOpen, "the one behind gives up at 500 ms")
		require.NoError(t, <-done)
		assert.Equal(t, time.Second+time.Nanosecond, time.Duration(ran.Load()), "the one ahead probes at 1 s")
		assert.EqualValues(t, 2, rej.n.Load(), "each rejected once")
	})
}

// TestFreedProbeSlotGoesToOneWaiter: two probes canceled in a row free
// one slot (HalfOpenRequests), not two: the first caller to wait takes
// it at once, and the next one waits for that probe to end.
func TestFreedProbeSlotGoesToOneWaiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("dep", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(time.Second))
		calls(b, 1, failed)
		time.Sleep(time.Second + time.Nanosecond)
		for range 2 {
			ctx, cancel := context.WithCancel(t.Context())
			require.ErrorIs(t, b.Execute(ctx, func(ctx context.Context) error { cancel(); return ctx.Err() }), context.Canceled)
		}
		start := time.Now()
		require.NoError(t, b.Wait(t.Context(), breaker.ErrTooManyRequests))
		assert.Zero(t, time.Since(start), "the freed slot, at once")
		probe := make(chan error)
		go func() {
			probe <- b.Execute(t.Context(), func(context.Context) error { time.Sleep(50 * time.Millisecond); return nil })
		}()
		synctest.Wait()
		busy := b.Execute(t.Context(), ok)
		require.ErrorIs(t, busy, breaker.ErrTooManyRequests)
		require.NoError(t, b.Wait(t.Context(), busy))
		assert.Equal(t, 50*time.Millisecond, time.Since(start), "when the probe closed the breaker")
		require.NoError(t, <-probe)
	})
}

// TestSharedWaitTicksAtTheOwnProbe: a shared breaker whose own breaker is
// open, with the fleet closed, lets its waiter probe at its own open
// timeout, not at the next flush interval after it.
func TestSharedWaitTicksAtTheOwnProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := sharedFleet(t, newMemStore(), 1, breaker.ConsecutiveFailures(1), breaker.FailureRate(0.5, 1000),
			breaker.OpenTimeout(950*time.Millisecond))[0]
		start := time.Now()
		calls(b, 1, failed)
		var ran atomic.Int64
		require.NoError(t, waitAndRun(t.Context(), b, func(context.Context) error { ran.Store(int64(time.Since(start))); return nil }))
		assert.Equal(t, 950*time.Millisecond+time.Nanosecond, time.Duration(ran.Load()))
	})
}

// TestSharedWaitGivesUpAtOnceWithoutAProbeInItsBudget: a shared
// breaker's Wait returns the rejection at once when no probe can come
// within ctx's deadline: the own breaker's next probe if the fleet is not
// open, the next flush interval if it is.
func TestSharedWaitGivesUpAtOnceWithoutAProbeInItsBudget(t *testing.T) {
	tests := []struct {
		name        string
		consecutive uint32
		budget      time.Duration
	}{
		{"its own breaker open, its probe after the deadline", 1, 500 * time.Millisecond},
		{"the fleet open, the next flush after the deadline", 0, sharedFlush / 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := sharedFleet(t, newMemStore(), 1, breaker.ConsecutiveFailures(tt.consecutive))[0]
				calls(b, 10, failed)
				time.Sleep(sharedFlush + sharedFlush/2)
				rejected := b.Execute(t.Context(), ok)
				require.ErrorIs(t, rejected, breaker.ErrOpen)
				ctx, cancel := context.WithTimeout(t.Context(), tt.budget)
				defer cancel()
				start := time.Now()
				assert.ErrorIs(t, b.Wait(ctx, rejected), breaker.ErrOpen)
				assert.Zero(t, time.Since(start))
			})
		})
	}
}

// TestWaitersGoWhenTheFleetGoesUnconfirmed: a waiter on an open fleet
// whose store stops answering goes when the replica decides alone (its
// own breaker closed), once, without being let go while the fleet's state
// still held.
func TestWaitersGoWhenTheFleetGoesUnconfirmed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rej := &rejections{}
		store := newMemStore()
		b := sharedFleet(t, store, 1, breaker.ConsecutiveFailures(0), breaker.WithListener(rej))[0]
		calls(b, 10, failed)
		time.Sleep(sharedFlush + sharedFlush/2) // open since 100 ms
		store.hang.Store(true)
		start := time.Now()
		require.NoError(t, waitAndRun(t.Context(), b, ok))
		assert.EqualValues(t, 1, rej.n.Load(), "rejected once")
		assert.LessOrEqual(t, time.Since(start), sharedOpen)
		assert.Equal(t, resilience.StateClosed, b.FleetState())
	})
}

// TestHalfOpenQueueStartsAfreshForALateWaiter: the only waiter of a
// half-open queue gives up 10 ms after it came; the next, 50 ms after it,
// waits a full flush interval from when it came, not from when the first
// did.
func TestHalfOpenQueueStartsAfreshForALateWaiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, busy, release := busyHalfOpen(t)
		start := time.Now()
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
		defer cancel()
		require.ErrorIs(t, b.Wait(ctx, busy), breaker.ErrTooManyRequests)
		time.Sleep(40 * time.Millisecond)
		late, lateAt := waitedUntil(t.Context(), b, busy, start)
		require.NoError(t, <-late)
		assert.Equal(t, 150*time.Millisecond, time.Duration(lateAt.Load()))
		close(release)
	})
}

// TestWaitWithAContextDoneTakesNoSlot: a caller whose context is already
// done when it waits gets its rejection back at once and takes nothing:
// the probe slot a canceled probe freed goes to the next caller, at once.
func TestWaitWithAContextDoneTakesNoSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("dep", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(time.Second))
		calls(b, 1, failed)
		time.Sleep(time.Second + time.Nanosecond)
		ctx, cancel := context.WithCancel(t.Context())
		require.ErrorIs(t, b.Execute(ctx, func(ctx context.Context) error { cancel(); return ctx.Err() }), context.Canceled)
		require.ErrorIs(t, b.Wait(ctx, breaker.ErrTooManyRequests), breaker.ErrTooManyRequests)
		start := time.Now()
		require.NoError(t, b.Wait(t.Context(), breaker.ErrTooManyRequests))
		assert.Zero(t, time.Since(start), "the freed slot, at once")
	})
}
