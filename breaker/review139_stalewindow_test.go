package breaker_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// review139Store is a store double the test steers: the fleet's state and
// generation it answers, or an error (Redis down).
type review139Store struct {
	mu    sync.Mutex
	state resilience.State
	gen   uint64
	fail  bool
	syncs atomic.Int64
}

func (s *review139Store) set(st resilience.State, gen uint64, fail bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.state, s.gen, s.fail = st, gen, fail
}

func (s *review139Store) Sync(ctx context.Context, name string, sy breaker.Sync) (breaker.Fleet, error) {
	s.syncs.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail {
		return breaker.Fleet{}, errors.New("redis down")
	}
	return breaker.Fleet{State: s.state, Generation: s.gen}, nil
}

var errReview139 = errors.New("dependency failed")

// TestReview139StaleOwnWindowTripsWhenRedisGoesDown: a partial outage (3
// failures in 4, never 5 in a row) opens the fleet; the fleet recovers;
// the dependency is healthy. Redis then goes down and the replica decides
// alone, with FailureRate applied to its own window, which still holds
// the outage's failures (the own breaker never changed state, so never
// started its counts afresh). One transient failure then opens the
// replica's own breaker, and healthy calls are rejected for OpenTimeout.
// A local breaker with the same options, fed the same calls, opened in
// the outage, started afresh when it closed, and lets them through.
func TestReview139StaleOwnWindowTripsWhenRedisGoesDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		const flush = 20 * time.Millisecond
		opts := []breaker.Option{
			breaker.FailureRate(0.5, 20),
			breaker.Window(time.Minute, 6),
			breaker.OpenTimeout(500 * time.Millisecond),
		}
		store := &review139Store{state: resilience.StateClosed, gen: 1}
		var unavailable atomic.Int64
		shared := breaker.New("r139", append(opts, breaker.Shared(store), breaker.FlushInterval(flush),
			breaker.WithListener(resilience.ListenerFunc(func(e resilience.Event) {
				if e.Kind == resilience.EventSharedStateUnavailable {
					unavailable.Add(1)
				}
			})))...)
		defer shared.Close()
		local := breaker.New("r139-local", opts...)

		call := func(b *breaker.Breaker, fail bool) error {
			return b.Execute(ctx, func(context.Context) error {
				if fail {
					return errReview139
				}
				return nil
			})
		}
		time.Sleep(2 * flush) // the shared one has heard generation 1
		synctest.Wait()

		// Partial outage: F F F S, 80 calls, 1 ms apart.
		for i := range 80 {
			_ = call(shared, i%4 != 3)
			_ = call(local, i%4 != 3)
			time.Sleep(time.Millisecond)
		}
		if local.State() == resilience.StateClosed {
			t.Fatal("setup: the local breaker did not open in the outage")
		}
		// The fleet opened on it (the other replicas' failures too).
		store.set(resilience.StateOpen, 2, false)
		time.Sleep(2 * flush)
		synctest.Wait()
		if shared.FleetState() != resilience.StateOpen {
			t.Fatalf("setup: fleet state %v", shared.FleetState())
		}
		// The dependency is healthy again: the fleet closes on its probe,
		// the local breaker on its own.
		time.Sleep(600 * time.Millisecond)
		store.set(resilience.StateClosed, 3, false)
		time.Sleep(2 * flush)
		synctest.Wait()
		if shared.FleetState() != resilience.StateClosed {
			t.Fatalf("setup: fleet state %v", shared.FleetState())
		}
		for range 10 {
			if err := call(shared, false); err != nil {
				t.Fatalf("setup: shared rejected a call to a healthy dependency: %v", err)
			}
			if err := call(local, false); err != nil {
				t.Fatalf("setup: local rejected a call to a healthy dependency: %v", err)
			}
			time.Sleep(time.Millisecond)
		}
		// Redis goes down: the replica decides alone.
		store.set(resilience.StateClosed, 3, true)
		time.Sleep(2 * flush)
		synctest.Wait()
		if unavailable.Load() == 0 {
			t.Fatal("setup: no EventSharedStateUnavailable")
		}
		// One transient failure, then healthy calls for 400 ms.
		_ = call(shared, true)
		_ = call(local, true)
		rejectedShared, rejectedLocal := 0, 0
		for range 40 {
			if err := call(shared, false); breaker.IsRejection(err) {
				rejectedShared++
			}
			if err := call(local, false); breaker.IsRejection(err) {
				rejectedLocal++
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Logf("healthy calls rejected after one failure with Redis down: shared %d of 40, local %d of 40; own counts %+v",
			rejectedShared, rejectedLocal, shared.Counts())
		if rejectedShared > rejectedLocal {
			t.Errorf("the shared breaker rejected %d of 40 calls to a healthy dependency that a local breaker (%d rejected) let through: its own window still held the outage's failures",
				rejectedShared, rejectedLocal)
		}
	})
}

// review139FlakyStore answers closed, generation 1, but fails the Syncs
// it is told to (one slow flush lost to its deadline).
type review139FlakyStore struct{ failNext atomic.Int64 }

func (s *review139FlakyStore) Sync(ctx context.Context, name string, sy breaker.Sync) (breaker.Fleet, error) {
	if s.failNext.Add(-1) >= 0 {
		return breaker.Fleet{}, context.DeadlineExceeded
	}
	return breaker.Fleet{State: resilience.StateClosed, Generation: 1}, nil
}

// TestReview139OneLostFlushTripsOnTheFleetsHistory: the fleet is closed
// and healthy (its store answers every flush but one); the replica's own
// window holds 16 failures in 24 calls from a bad patch 20 s ago, which
// the fleet, on its rate of the whole fleet, rightly did not open on. One
// flush lost (a GC pause, a slow Redis moment) makes the replica decide
// alone until the next flush, and a single failure in that interval opens
// its own breaker on the rate of its window: every call rejected for
// OpenTimeout though the fleet, the dependency and a local breaker (which
// would have opened 20 s ago and started afresh) are all fine.
func TestReview139OneLostFlushTripsOnTheFleetsHistory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		const flush = 100 * time.Millisecond
		store := &review139FlakyStore{}
		b := breaker.New("r139-flaky", breaker.Shared(store), breaker.FlushInterval(flush),
			breaker.FailureRate(0.5, 20), breaker.Window(time.Minute, 6), breaker.OpenTimeout(time.Second))
		defer b.Close()
		call := func(fail bool) error {
			return b.Execute(ctx, func(context.Context) error {
				if fail {
					return errReview139
				}
				return nil
			})
		}
		time.Sleep(2 * flush)
		// A bad patch: F F S ... 24 calls, two failures in three (never 5
		// in a row).
		for i := range 24 {
			_ = call(i%3 != 2)
		}
		time.Sleep(20 * time.Second) // healthy since, no traffic to speak of
		for range 5 {
			if err := call(false); err != nil {
				t.Fatalf("setup: %v", err)
			}
		}
		// One flush lost.
		synctest.Wait()
		store.failNext.Store(1)
		time.Sleep(flush + flush/2) // the lost one has ended, the next not begun
		synctest.Wait()
		_ = call(true) // one transient failure
		rejected := 0
		for range 20 {
			if err := call(false); breaker.IsRejection(err) {
				rejected++
			}
			time.Sleep(20 * time.Millisecond)
		}
		if rejected > 0 {
			t.Errorf("one lost flush and one failure: %d of 20 calls to a healthy dependency rejected by the replica's own breaker, fleet %v (the fleet had not opened; a local breaker would have opened 20 s before and started afresh)",
				rejected, b.FleetState())
		}
	})
}

// TestGoingAloneKeepsTheRunOfFailures: the window a replica forgets as it
// goes alone keeps the run of failures that ends it, which
// ConsecutiveFailures goes by: four failures while the fleet decides, the
// store down, one more failure opens the replica's own breaker, as it
// would a local one.
func TestGoingAloneKeepsTheRunOfFailures(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const flush = 50 * time.Millisecond
		store := &review139FlakyStore{}
		b := breaker.New("alone-run", breaker.Shared(store), breaker.FlushInterval(flush),
			breaker.ConsecutiveFailures(5), breaker.FailureRate(0.5, 20), breaker.Window(time.Minute, 6))
		defer b.Close()
		fail := func() { _ = b.Execute(t.Context(), func(context.Context) error { return errReview139 }) }
		time.Sleep(2 * flush)
		for range 4 {
			fail()
		}
		synctest.Wait()
		store.failNext.Store(1 << 30) // the store down from the next flush on
		time.Sleep(2 * flush)
		synctest.Wait()
		if c := b.Counts(); c.ConsecutiveFailures != 4 || c.TotalFailures != 4 || b.State() != resilience.StateClosed {
			t.Fatalf("after going alone: %+v, %v; want the run of 4 kept, closed", c, b.State())
		}
		fail()
		if b.State() != resilience.StateOpen {
			t.Errorf("a fifth failure in a row left the breaker %v", b.State())
		}
	})
}
