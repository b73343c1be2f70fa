package breaker_test

import (
	"context"
	"errors"
	"math"
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

// TestSharedIdleGrantIsGivenUp: a replica granted the only probe goes
// idle: it gives its permit up within a flush interval and tells the
// store, another replica probes, and the idle one, calling again while
// that probe runs, is rejected: never two probes at once.
func TestSharedIdleGrantIsGivenUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newMemStore()
		bs := sharedFleet(t, store, 2, breaker.ConsecutiveFailures(0), breaker.HalfOpenRequests(1))
		a, b := bs[0], bs[1]
		for range 30 {
			_ = a.Execute(context.Background(), func(context.Context) error { return errDown })
		}
		time.Sleep(2 * sharedFlush)
		require.Equal(t, resilience.StateOpen, a.FleetState())
		// a wants to probe while the fleet is open: the flush that finds it
		// half-open grants a the probe; then a goes idle.
		// The flushes come at multiples of 10 ms too: synctest.Wait lets
		// one due at the same instant finish before the state is read, so
		// that a's next call is never the probe it is granted (it would
		// fail it, and the fleet would open again for an open timeout).
		for a.FleetState() == resilience.StateOpen {
			_ = a.Execute(context.Background(), func(context.Context) error { return errDown })
			time.Sleep(10 * time.Millisecond)
			synctest.Wait()
		}
		idle := time.Now()
		var inflight, most atomic.Int64
		var probedAt atomic.Int64
		release := make(chan struct{})
		enter := func() func() { // a call reaches the dependency
			n := inflight.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			return func() { inflight.Add(-1) }
		}
		op := func(context.Context) error {
			running := enter()
			defer running()
			probedAt.CompareAndSwap(0, int64(time.Since(idle)))
			<-release
			return nil
		}
		var wg sync.WaitGroup
		wg.Go(func() {
			for b.Execute(context.Background(), op) != nil && time.Since(idle) < 5*sharedOpen {
				time.Sleep(time.Millisecond)
			}
		})
		for probedAt.Load() == 0 && time.Since(idle) < 5*sharedOpen {
			time.Sleep(time.Millisecond)
		}
		t.Logf("the other replica probed %v after the granted one went idle", time.Duration(probedAt.Load()))
		assert.NotZero(t, probedAt.Load(), "the other replica probed")
		assert.LessOrEqual(t, time.Duration(probedAt.Load()), 4*sharedFlush, "the idle replica gave its grant up")
		for range 20 { // the idle replica calls again while b's probe runs
			_ = a.Execute(context.Background(), func(context.Context) error { enter()(); return nil })
			time.Sleep(10 * time.Millisecond)
		}
		close(release)
		wg.Wait()
		assert.EqualValues(t, 1, most.Load(), "HalfOpenRequests probes at once")
	})
}

// TestSharedLongFlushIntervalKeepsAConfirmedState: with a flush interval
// longer than OpenTimeout, a fleet state the store confirmed at the last
// flush holds until the next one: it is not unconfirmed in between.
func TestSharedLongFlushIntervalKeepsAConfirmedState(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newMemStore()
		var unconfirmed atomic.Int64
		b := sharedFleet(t, store, 1, breaker.ConsecutiveFailures(0), breaker.FlushInterval(2*time.Second),
			breaker.WithListener(resilience.ListenerFunc(func(e resilience.Event) {
				if errors.Is(e.Err, breaker.ErrFleetUnconfirmed) {
					unconfirmed.Add(1)
				}
			})))[0]
		for range 30 {
			_ = b.Execute(context.Background(), func(context.Context) error { return errDown })
		}
		time.Sleep(2*time.Second + 10*time.Millisecond) // the first flush opens the fleet
		require.Equal(t, resilience.StateOpen, b.FleetState())
		time.Sleep(1500 * time.Millisecond) // confirmed 1.5 s ago, the next flush in 0.5 s
		assert.Equal(t, resilience.StateOpen, b.FleetState(), "confirmed at the last flush")
		assert.Error(t, b.Check())
		assert.Zero(t, unconfirmed.Load(), "no ErrFleetUnconfirmed")
	})
}

// batchCheck is a memStore that notes batches with more failures than
// requests.
type batchCheck struct {
	*memStore
	bad, batches atomic.Int64
}

func (c *batchCheck) Sync(ctx context.Context, name string, s breaker.Sync) (breaker.Fleet, error) {
	if s.Failures > s.Requests {
		c.bad.Add(1)
	}
	if s.Batch != "" {
		c.batches.Add(1)
	}
	// Without ctx's deadline: a flush interval of 1 ms gives each flush
	// 1 ms, which a loaded machine misses now and then, and this test is
	// about what the batches hold, not about deadlines.
	return c.memStore.Sync(context.WithoutCancel(ctx), name, s)
}

// TestSharedBatchNeverHasMoreFailuresThanRequests: calls failing from many
// goroutines while the flusher runs every millisecond: no batch carries a
// failure without its request, and the totals are exact.
func TestSharedBatchNeverHasMoreFailuresThanRequests(t *testing.T) {
	store := &batchCheck{memStore: newMemStore()}
	b := breaker.New("batches", breaker.Shared(store), breaker.FlushInterval(time.Millisecond), breaker.ConsecutiveFailures(0),
		breaker.FailureRate(0.5, math.MaxUint32), breaker.Window(time.Minute, 6))
	var calls atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range 8 {
		wg.Go(func() {
			for time.Since(start) < 700*time.Millisecond {
				if b.Execute(context.Background(), func(context.Context) error { return errDown }) != nil {
					calls.Add(1)
				}
			}
		})
	}
	wg.Wait()
	require.NoError(t, b.Close())
	t.Logf("%d calls, %d batches", calls.Load(), store.batches.Load())
	assert.Zero(t, store.bad.Load(), "batches with more failures than requests")
	fleet, err := b.Fleet(context.Background())
	require.NoError(t, err)
	assert.EqualValues(t, calls.Load(), fleet.Requests)
	assert.EqualValues(t, calls.Load(), fleet.Failures)
}
