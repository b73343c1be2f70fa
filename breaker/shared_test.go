package breaker_test

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
	"github.com/resiliencekit/resiliencekit/resilience"
)

const (
	sharedFlush = 100 * time.Millisecond
	sharedOpen  = time.Second
)

// sharedFleet returns n breakers of one name on store, with the default
// options (ConsecutiveFailures(5) among them) and the failure rate,
// closed when the test ends.
func sharedFleet(t *testing.T, store breaker.SharedStore, n int, opts ...breaker.Option) []*breaker.Breaker {
	var bs []*breaker.Breaker
	for range n {
		o := append([]breaker.Option{breaker.Shared(store), breaker.FlushInterval(sharedFlush), breaker.FailureRate(0.5, 10),
			breaker.Window(10*time.Second, 10), breaker.OpenTimeout(sharedOpen)}, opts...)
		b := breaker.New("shared", o...)
		t.Cleanup(func() { _ = b.Close() })
		bs = append(bs, b)
	}
	return bs
}

// drive makes each replica call dep every millisecond until stop says so,
// and returns when they have stopped.
func drive(bs []*breaker.Breaker, dep *dependency, stop func() bool) {
	var wg sync.WaitGroup
	for _, b := range bs {
		wg.Go(func() {
			for !stop() {
				_ = b.Execute(context.Background(), dep.call)
				time.Sleep(time.Millisecond)
			}
		})
	}
	wg.Wait()
}

// TestSharedRecoversWithDefaultOptions: with the default
// ConsecutiveFailures(5) beside the failure rate, every replica's own
// breaker opens in an outage of 3 s; when the dependency is healthy again
// the fleet closes within OpenTimeout and two flush intervals, with
// HalfOpenRequests probes. The replicas' own breakers turn half-open on
// their own timers and take the fleet's probe.
func TestSharedRecoversWithDefaultOptions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newMemStore()
		bs := sharedFleet(t, store, 3)
		dep := &dependency{}
		dep.down.Store(true)
		start := time.Now()
		drive(bs, dep, func() bool { return time.Since(start) > 3*time.Second })
		st, _ := store.state("shared")
		require.Equal(t, resilience.StateOpen, st, "the outage opened the fleet")

		dep.down.Store(false)
		healthy := time.Now()
		before := dep.calls.Load()
		var closedAt atomic.Int64
		var probes atomic.Int64 // calls that reached the dependency while the fleet was not closed
		probing := &dependency{}
		var wg sync.WaitGroup
		for _, b := range bs {
			wg.Go(func() {
				for time.Since(healthy) < sharedOpen+5*sharedFlush {
					_ = b.Execute(context.Background(), func(ctx context.Context) error {
						if st, _ := store.state("shared"); st != resilience.StateClosed {
							probes.Add(1)
						}
						return probing.call(ctx)
					})
					if st, _ := store.state("shared"); st == resilience.StateClosed {
						closedAt.CompareAndSwap(0, int64(time.Since(healthy)))
					}
					time.Sleep(time.Millisecond)
				}
			})
		}
		wg.Wait()
		require.NotZero(t, closedAt.Load(), "the fleet closed")
		t.Logf("the fleet closed %v after the dependency was healthy, after %d probes", time.Duration(closedAt.Load()), probes.Load())
		assert.LessOrEqual(t, time.Duration(closedAt.Load()), sharedOpen+2*sharedFlush)
		assert.EqualValues(t, 1, probes.Load(), "HalfOpenRequests probes")
		assert.Greater(t, probing.calls.Load(), int64(1000), "and serves")
		assert.Equal(t, before, dep.calls.Load())
		for _, b := range bs {
			assert.Equal(t, resilience.StateClosed, b.State())
		}
	})
}

// TestSharedStoreDownWhileOpen: the store fails while the fleet is open
// and the dependency recovers: the replica decides alone once the fleet's
// state has gone unconfirmed for the open timeout, and its first success
// comes within OpenTimeout and two flush intervals; the store's state
// takes over again when it answers.
func TestSharedStoreDownWhileOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newMemStore()
		var unconfirmed atomic.Int64
		bs := sharedFleet(t, store, 1, breaker.ConsecutiveFailures(0), breaker.OpenTimeout(time.Minute),
			breaker.WithListener(resilience.ListenerFunc(func(e resilience.Event) {
				if errors.Is(e.Err, breaker.ErrFleetUnconfirmed) {
					unconfirmed.Add(1)
				}
			})))
		b := bs[0]
		dep := &dependency{}
		dep.down.Store(true)
		for range 30 {
			_ = b.Execute(context.Background(), dep.call)
		}
		time.Sleep(2 * sharedFlush)
		require.Equal(t, resilience.StateOpen, b.State())
		store.fail.Store(true)
		dep.down.Store(false)
		down := time.Now()
		var first time.Duration
		for b.Execute(context.Background(), dep.call) != nil {
			time.Sleep(time.Millisecond)
		}
		first = time.Since(down)
		t.Logf("first success %v after the store went down", first)
		assert.LessOrEqual(t, first, time.Minute+2*sharedFlush)
		assert.EqualValues(t, 1, unconfirmed.Load(), "one event says the replica decides alone")
		store.fail.Store(false)
		time.Sleep(2 * sharedFlush)
		st, _ := store.state(b.Name())
		assert.Equal(t, resilience.StateOpen, st, "the store held its opening (half-open: open past its timeout)")
		assert.Equal(t, resilience.StateClosed, b.FleetState(), "its own call succeeded while it decided alone: it vouches for the dependency")
		for range 3 {
			require.NoError(t, b.Execute(context.Background(), dep.call), "and is not refused by a stale opening")
			time.Sleep(sharedFlush)
		}
		st, _ = store.state(b.Name())
		assert.Equal(t, resilience.StateClosed, st, "its call probed for the fleet, which closed")
	})
}

// A replica that decided alone with no success of its own to tell goes
// by the store's state again when it answers.
func TestSharedStoreBackWithNoSuccessMeanwhile(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newMemStore()
		bs := sharedFleet(t, store, 1, breaker.ConsecutiveFailures(0), breaker.OpenTimeout(time.Minute))
		b := bs[0]
		dep := &dependency{}
		dep.down.Store(true)
		for range 30 {
			_ = b.Execute(context.Background(), dep.call)
		}
		time.Sleep(2 * sharedFlush)
		require.Equal(t, resilience.StateOpen, b.State())
		store.fail.Store(true)
		time.Sleep(time.Minute + 2*sharedFlush)
		require.Equal(t, resilience.StateClosed, b.FleetState(), "alone")
		store.fail.Store(false)
		time.Sleep(2 * sharedFlush)
		assert.Equal(t, resilience.StateHalfOpen, b.FleetState(), "the store's state again")
	})
}

// TestSharedFlushesOncePerInterval: while the fleet is half-open and a
// probe runs elsewhere, a replica's rejected calls make no extra flush:
// one per interval, whatever the traffic.
func TestSharedFlushesOncePerInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newMemStore()
		bs := sharedFleet(t, store, 2, breaker.ConsecutiveFailures(0))
		dep := &dependency{}
		dep.down.Store(true)
		for range 30 {
			_ = bs[0].Execute(context.Background(), dep.call)
		}
		time.Sleep(sharedOpen + 2*sharedFlush)
		require.Equal(t, resilience.StateHalfOpen, bs[1].State())
		release := make(chan struct{})
		go func() { // bs[0] holds the probe
			for bs[0].Execute(context.Background(), func(context.Context) error { <-release; return nil }) != nil {
				time.Sleep(time.Millisecond)
			}
		}()
		time.Sleep(3 * sharedFlush)
		before := store.syncs.Load()
		start := time.Now()
		var rejected int
		for time.Since(start) < time.Second {
			for range 100 {
				if bs[1].Execute(context.Background(), dep.call) != nil {
					rejected++
				}
			}
			time.Sleep(time.Millisecond)
		}
		syncs := store.syncs.Load() - before
		close(release)
		t.Logf("%d calls rejected, %d flushes in 1 s by 2 replicas", rejected, syncs)
		assert.Greater(t, rejected, 10000)
		// Two replicas a tick each interval, 10 or 11 ticks each as the
		// second falls between them, and a flush now and then for the
		// probe of bs[0]'s loop: not one for each of 100,000 calls (in a
		// synctest bubble, goroutines woken at one instant run in any
		// order: 23 was seen once in about 15 runs).
		assert.LessOrEqual(t, syncs, int64(2*time.Second/sharedFlush)+4)
	})
}

// TestSharedFailureRateLocalWhileStoreDown: with the store down, a
// replica alone is protected as a local breaker would be: the failure
// rate opens its own breaker.
func TestSharedFailureRateLocalWhileStoreDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newMemStore()
		store.fail.Store(true)
		b := sharedFleet(t, store, 1, breaker.ConsecutiveFailures(0))[0]
		time.Sleep(2 * sharedFlush)
		dep := &dependency{}
		var opened bool
		for i := range 100 {
			dep.down.Store(i%2 == 0) // every other call fails: 50%, never 5 in a row
			if breaker.IsRejection(b.Execute(context.Background(), dep.call)) {
				opened = true
				break
			}
		}
		assert.True(t, opened, "the failure rate opened the replica's own breaker")
		assert.Equal(t, resilience.StateOpen, b.State())
	})
}

// TestSharedCloseIsBoundedWhenTheStoreHangs: Close takes at most two
// flush intervals (one for a flush under way, one for the last), whatever
// the store does.
func TestSharedCloseIsBoundedWhenTheStoreHangs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newMemStore()
		b := breaker.New("hung", breaker.Shared(store), breaker.FlushInterval(sharedFlush), breaker.FailureRate(0.5, 20),
			breaker.Window(10*time.Second, 10))
		_ = b.Execute(context.Background(), func(context.Context) error { return nil })
		store.hang.Store(true)
		time.Sleep(sharedFlush + sharedFlush/2) // a flush under way
		start := time.Now()
		err := b.Close()
		took := time.Since(start)
		t.Logf("Close took %v", took)
		assert.Error(t, err)
		assert.LessOrEqual(t, took, 2*sharedFlush)
	})
}

// TestSharedReplicaAloneIsBounded: a fleet state the store never confirms
// again gives way after the open timeout, and the rejections stop.
func TestSharedReplicaAloneIsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newMemStore()
		b := sharedFleet(t, store, 1, breaker.ConsecutiveFailures(0))[0]
		for range 30 {
			_ = b.Execute(context.Background(), func(context.Context) error { return errDown })
		}
		time.Sleep(2 * sharedFlush)
		require.Error(t, b.Check())
		store.hang.Store(true)
		time.Sleep(sharedOpen + sharedFlush)
		assert.NoError(t, b.Check(), "deciding alone: its own breaker is closed")
		assert.NoError(t, b.Execute(context.Background(), func(context.Context) error { return nil }))
	})
}

// TestSharedRecoversWithRareCalls: replicas that call less often than
// they flush leave every permit they are granted unused for a flush
// interval, and give it up; the next call of a replica whose permit lapsed
// probes without one. Without it the fleet stayed half-open, every call
// rejected, for as long as the calls stayed rare (a review: 40 of 40
// calls over 6 s).
func TestSharedRecoversWithRareCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const flush, open, every = 50 * time.Millisecond, 200 * time.Millisecond, 310 * time.Millisecond
		store := newMemStore()
		bs := sharedFleet(t, store, 2, breaker.ConsecutiveFailures(0), breaker.FlushInterval(flush), breaker.OpenTimeout(open))
		dep := &dependency{}
		dep.down.Store(true)
		start := time.Now()
		drive(bs, dep, func() bool { return time.Since(start) > time.Second })
		st, _ := store.state("shared")
		require.Equal(t, resilience.StateOpen, st, "the outage opened the fleet")

		dep.down.Store(false)
		healthy := time.Now()
		var wg sync.WaitGroup
		rejected := make([]int, len(bs))
		var lastRejected atomic.Int64
		for i, b := range bs {
			wg.Go(func() {
				time.Sleep(time.Duration(i) * every / 2) // the replicas' calls interleave
				for time.Since(healthy) < 20*every {
					if err := b.Execute(context.Background(), dep.call); breaker.IsRejection(err) {
						rejected[i]++
						lastRejected.Store(int64(time.Since(healthy)))
					}
					time.Sleep(every)
				}
			})
		}
		wg.Wait()
		st, _ = store.state("shared")
		t.Logf("calls every %v per replica: rejected %v, the last %v after the dependency was healthy; fleet %v", every, rejected, time.Duration(lastRejected.Load()), st)
		assert.Equal(t, resilience.StateClosed, st)
		assert.Less(t, time.Duration(lastRejected.Load()), open+3*every, "once half-open, a replica's second call probes")
	})
}

// TestSharedRareCallWaitsBoundedForTheProbe: a call that asks for the
// fleet's probe at once waits for a flush of its own, within its context
// (then it returns the context's error) and two flush intervals when the
// store hangs (then it is rejected).
func TestSharedRareCallWaitsBoundedForTheProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newMemStore()
		b := sharedFleet(t, store, 1, breaker.ConsecutiveFailures(0))[0]
		for range 20 {
			_ = b.Execute(context.Background(), func(context.Context) error { return errDown })
		}
		time.Sleep(sharedOpen + 3*sharedFlush)
		require.Equal(t, resilience.StateHalfOpen, b.FleetState())
		store.hang.Store(true)

		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		defer cancel()
		start := time.Now()
		err := b.Execute(ctx, ok)
		assert.ErrorIs(t, err, context.DeadlineExceeded, "the caller's context ended first")
		assert.Equal(t, 10*time.Millisecond, time.Since(start), "within the caller's context")

		time.Sleep(3 * sharedFlush)
		start = time.Now()
		err = b.Execute(context.Background(), ok)
		assert.True(t, breaker.IsRejection(err), "%v", err)
		assert.LessOrEqual(t, time.Since(start), 2*sharedFlush, "two flush intervals at most")
		assert.Positive(t, time.Since(start), "it waited for a flush")

		start = time.Now()
		err = b.Execute(context.Background(), ok)
		assert.True(t, breaker.IsRejection(err), "%v", err)
		assert.Zero(t, time.Since(start), "a call right after one that asked is rejected at once")
	})
}
