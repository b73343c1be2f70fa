package breaker_test

import (
	"context"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// waitAndRun runs op through b, waiting whenever b rejects it, as
// pipeline.WaitWhenOpen does; it returns op's error, or the rejection if
// the wait ended first.
func waitAndRun(ctx context.Context, b *breaker.Breaker, op func(context.Context) error) error {
	for {
		err := b.Execute(ctx, op)
		if !breaker.IsRejection(err) {
			return err
		}
		if b.Wait(ctx, err) != nil {
			return err
		}
	}
}

// rejections counts the calls a breaker rejected.
type rejections struct{ n atomic.Int64 }

func (r *rejections) OnEvent(e resilience.Event) {
	if e.Kind == resilience.EventRejected {
		r.n.Add(1)
	}
}

func (r *rejections) Wants(k resilience.EventKind) bool { return k == resilience.EventRejected }

// TestWaitersProbeOldestFirst: when the breaker turns half-open, the
// oldest waiters are its probes, and only they are woken: the others are
// not rejected again while the probes run.
func TestWaitersProbeOldestFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rej := &rejections{}
		b := breaker.New("dep", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(time.Second),
			breaker.HalfOpenRequests(3), breaker.WithListener(rej))
		require.ErrorIs(t, b.Execute(t.Context(), func(context.Context) error { return errDown }), errDown)

		var mu sync.Mutex
		var order []int
		var wg sync.WaitGroup
		for i := range 50 {
			wg.Go(func() {
				time.Sleep(time.Duration(i) * time.Millisecond)
				err := waitAndRun(t.Context(), b, func(context.Context) error {
					mu.Lock()
					order = append(order, i)
					mu.Unlock()
					time.Sleep(200 * time.Millisecond) // a slow probe
					return nil
				})
				assert.NoError(t, err)
			})
		}
		time.Sleep(time.Second + 100*time.Millisecond) // the probes run
		mu.Lock()
		assert.ElementsMatch(t, []int{0, 1, 2}, order, "the three oldest waiters are the probes")
		mu.Unlock()
		assert.EqualValues(t, 50, rej.n.Load(), "each waiter rejected once, none again while the probes run")
		wg.Wait()
		assert.Len(t, order, 50)
	})
}

// TestReopenDropsHopelessWaiters: a waiter whose deadline comes before the
// next probe gives up as soon as the breaker opens again, not at its
// deadline.
func TestReopenDropsHopelessWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("dep", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(time.Second))
		fail := func(context.Context) error {
			time.Sleep(100 * time.Millisecond)
			return errDown
		}
		require.ErrorIs(t, b.Execute(t.Context(), fail), errDown)                    // open at 100 ms, probe at 1.1 s
		go func() { assert.ErrorIs(t, waitAndRun(t.Context(), b, fail), errDown) }() // the probe, fails at 1.2 s

		time.Sleep(time.Millisecond)
		ctx, cancel := context.WithTimeout(t.Context(), 1500*time.Millisecond) // past 1.1 s, before 2.2 s
		defer cancel()
		start := time.Now()
		err := waitAndRun(ctx, b, fail)
		require.True(t, breaker.IsRejection(err), "%v", err)
		assert.InDelta(t, 1099*time.Millisecond, time.Since(start), float64(time.Microsecond), "it gives up when the probe fails")
		assert.NoError(t, ctx.Err())
	})
}

// TestCanceledWaiterPassesItsTurn: a waiter whose context ends as the
// breaker lets it go, too late to leave the queue, does not take the
// probe slot with it: it passes its turn to the next waiter, which probes
// at once, not a FlushInterval later. Both ways the two can meet are
// made here, each in the one goroutine that also releases the waiter: on
// one P that goroutine goes on until it blocks, and the waiter runs after
// it (on more, another P may run the waiter in between, and it would take
// the probe, or leave the queue in time).
func TestCanceledWaiterPassesItsTurn(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	// The first waiter's context is canceled by a listener of the change
	// to half-open, just after the change released the waiter: woken by
	// its release, it finds its context done.
	t.Run("released, then its context ends", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			b := breaker.New("dep", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(time.Second),
				breaker.WithListener(resilience.ListenerFunc(func(e resilience.Event) {
					if e.Kind == resilience.EventStateChange && e.To == resilience.StateHalfOpen {
						cancel()
					}
				})))
			require.Error(t, b.Execute(t.Context(), func(context.Context) error { return errDown }))
			first, second, ran := twoWaiters(ctx, b)
			require.ErrorIs(t, <-first, breaker.ErrOpen, "the first gives up at 1 s, as it is released")
			require.NoError(t, <-second)
			assert.Equal(t, time.Second+time.Nanosecond, ran(), "the second is the probe at 1 s")
		})
	})
	// The first waiter's context is canceled, then the test, in the same
	// goroutine, moves the breaker to half-open, which releases it: woken
	// by its context, it finds it was released. The waiters queued while
	// half-open (FlushInterval an hour), and the probe failed: nothing but
	// the test moves the breaker to half-open again.
	t.Run("its context ends, then it is released", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			b := breaker.New("dep", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(time.Second), breaker.FlushInterval(time.Hour))
			require.Error(t, b.Execute(t.Context(), func(context.Context) error { return errDown }))
			time.Sleep(time.Second + time.Nanosecond)
			probe := make(chan struct{})
			go func() { _ = b.Execute(t.Context(), func(context.Context) error { <-probe; return errDown }) }()
			synctest.Wait()
			first, second, ran := twoWaiters(ctx, b)
			close(probe) // it fails: open again, for 1 s from now
			time.Sleep(time.Second + time.Nanosecond)
			cancel()
			require.Equal(t, resilience.StateHalfOpen, b.State())
			require.ErrorIs(t, <-first, breaker.ErrTooManyRequests, "the first gives up as it is released")
			require.NoError(t, <-second)
			assert.Equal(t, time.Second+time.Millisecond+time.Nanosecond, ran(), "the second is the probe at once")
		})
	})
}

// twoWaiters runs two calls through b that wait whenever b rejects them,
// the first with ctx, the second 1 ms later; ran reports when the second
// ran, since b was made (the calls start then).
func twoWaiters(ctx context.Context, b *breaker.Breaker) (first, second <-chan error, ran func() time.Duration) {
	start := time.Now()
	one, two := make(chan error, 1), make(chan error, 1)
	var at atomic.Int64
	go func() { one <- waitAndRun(ctx, b, func(context.Context) error { return nil }) }()
	time.Sleep(time.Millisecond)
	go func() {
		two <- waitAndRun(context.Background(), b, func(context.Context) error { at.Store(int64(time.Since(start))); return nil })
	}()
	synctest.Wait()
	return one, two, func() time.Duration { return time.Duration(at.Load()) }
}

// TestWaitUnderChurn: many callers wait on a flapping dependency, some
// canceling at random: every Wait returns by its deadline, nothing waits
// for ever (synctest would report a deadlock), and the breaker still
// works after.
func TestWaitUnderChurn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var down atomic.Bool
		b := breaker.New("dep", breaker.ConsecutiveFailures(3), breaker.OpenTimeout(50*time.Millisecond), breaker.HalfOpenRequests(2))
		op := func(ctx context.Context) error {
			time.Sleep(time.Duration(rand.IntN(5)) * time.Millisecond)
			if down.Load() {
				return errDown
			}
			return nil
		}
		go func() {
			for i := range 20 {
				down.Store(i%2 == 0)
				time.Sleep(37 * time.Millisecond)
			}
			down.Store(false)
		}()
		var wg sync.WaitGroup
		var late atomic.Int64
		for i := range 300 {
			wg.Go(func() {
				time.Sleep(time.Duration(rand.IntN(700)) * time.Millisecond)
				budget := time.Duration(1+rand.IntN(200)) * time.Millisecond
				ctx, cancel := context.WithTimeout(t.Context(), budget)
				defer cancel()
				if i%7 == 0 {
					time.AfterFunc(budget/3, cancel)
				}
				start := time.Now()
				_ = waitAndRun(ctx, b, op)
				if time.Since(start) > budget+5*time.Millisecond { // an op in flight at the deadline ends within 5 ms
					late.Add(1)
				}
			})
		}
		wg.Wait()
		assert.Zero(t, late.Load(), "every wait ends by its deadline")
		time.Sleep(100 * time.Millisecond)
		require.NoError(t, waitAndRun(t.Context(), b, op), "and the breaker still works")
	})
}

// TestFreedProbeSlotGoesToTheNextCaller: a half-open probe that counts for
// nothing (its caller canceled) frees its slot; a caller that waits just
// after, with nobody queued when it freed, takes it at once rather than a
// FlushInterval later.
func TestFreedProbeSlotGoesToTheNextCaller(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("dep", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(time.Second))
		require.Error(t, b.Execute(t.Context(), func(context.Context) error { return errDown }))
		time.Sleep(time.Second + time.Millisecond)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = b.Execute(ctx, func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }) // the probe
		}()
		synctest.Wait()
		rejected := b.Execute(t.Context(), func(context.Context) error { return nil })
		require.ErrorIs(t, rejected, breaker.ErrTooManyRequests)
		cancel()
		<-done // the probe's slot is free, with nobody waiting
		start := time.Now()
		require.NoError(t, b.Wait(t.Context(), rejected))
		assert.Zero(t, time.Since(start), "no FlushInterval to wait")
		require.NoError(t, b.Execute(t.Context(), func(context.Context) error { return nil }), "and it is the probe")
		assert.Equal(t, resilience.StateClosed, b.State())
	})
}

// TestHugeOpenTimeoutWaitsWithoutSpinning: an open timeout near
// math.MaxInt64 does not overflow the queue's timer into a busy loop
// (which would keep synctest's clock from ever moving).
func TestHugeOpenTimeoutWaitsWithoutSpinning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("dep", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(math.MaxInt64))
		rejected := b.Execute(t.Context(), func(context.Context) error { return errDown })
		require.Error(t, rejected)
		rejected = b.Execute(t.Context(), func(context.Context) error { return nil })
		require.ErrorIs(t, rejected, breaker.ErrOpen)
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(time.Second, cancel)
		start := time.Now()
		require.ErrorIs(t, b.Wait(ctx, rejected), breaker.ErrOpen)
		assert.Equal(t, time.Second, time.Since(start))
	})
}
