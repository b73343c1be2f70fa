package breaker_test

import (
	"context"
	"errors"
	"strings"
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

// These tests run the fleet logic of a shared breaker against memStore in
// a synctest bubble, where every replica flushes at exact instants: a
// replica made at 0 flushes at 100 ms, 200 ms, ... (sharedFlush); with
// sharedFleet's options ten failures open the fleet at the first flush
// (opened at 100 ms), and it is half-open from 1100 ms (sharedOpen later).

func ok(context.Context) error     { return nil }
func failed(context.Context) error { return errDown }

// calls makes n calls of op through b.
func calls(b *breaker.Breaker, n int, op func(context.Context) error) {
	for range n {
		_ = b.Execute(context.Background(), op)
	}
}

// at sleeps until d after start.
func at(start time.Time, d time.Duration) { time.Sleep(time.Until(start.Add(d))) }

// fleetEvents returns a recorder of the changes of state of a fleet
// ("NAME (fleet)"), as "from->to", and of the events of its store.
func fleetEvents() *recorder {
	return &recorder{note: func(e resilience.Event) string {
		switch {
		case e.Kind == resilience.EventStateChange && strings.HasSuffix(e.Name, "(fleet)"):
			return e.From.String() + "->" + e.To.String()
		case e.Kind == resilience.EventSharedStateUnavailable, e.Kind == resilience.EventSharedStateRestored:
			return e.Kind.String()
		}
		return ""
	}}
}

// fleetStatus asks b's store for the fleet's state and totals.
func fleetStatus(t *testing.T, b *breaker.Breaker) breaker.FleetStatus {
	t.Helper()
	st, err := b.Fleet(t.Context())
	require.NoError(t, err)
	return st
}

// TestFleetProbeGrantEdges: a replica asks for the fleet's probe at its
// flushes only for calls rejected in the last two flush intervals, holds
// a grant for one full flush interval from the flush that asked, and
// gives it up after; a call that comes more than two flush intervals after
// the last that wanted one asks at once, with a flush of its own; a
// probe's outcome is reported at the next flush, within one interval.
func TestFleetProbeGrantEdges(t *testing.T) {
	tests := []struct {
		name           string
		rejected, call time.Duration // since the replica was made
		admitted       bool
	}{
		{"a call rejected 150 ms before the half-open flush asks for the probe", 950 * time.Millisecond, 1150 * time.Millisecond, true},
		{"one rejected exactly two flush intervals before asks for none, and the next call asks at once", 900 * time.Millisecond, 1150 * time.Millisecond, true},
		{"the grant is held for exactly one flush interval", 1050 * time.Millisecond, 1250 * time.Millisecond, true},
		{"and given up at the flush after, the next call asking again at once", 1050 * time.Millisecond, 1350 * time.Millisecond, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := sharedFleet(t, newMemStore(), 1, breaker.ConsecutiveFailures(0))[0]
				start := time.Now()
				calls(b, 10, failed)
				at(start, tt.rejected)
				require.ErrorIs(t, b.Execute(t.Context(), ok), breaker.ErrOpen)
				at(start, tt.call)
				err := b.Execute(t.Context(), ok)
				if !tt.admitted {
					require.ErrorIs(t, err, breaker.ErrTooManyRequests)
					return
				}
				require.NoError(t, err, "the probe")
				synctest.Wait()
				assert.NotEqual(t, resilience.StateClosed, b.FleetState(), "reported at the next flush, not at once")
				time.Sleep(sharedFlush) // the next flush
				synctest.Wait()
				assert.Equal(t, resilience.StateClosed, b.FleetState(), "the probe closed the fleet within one flush interval")
			})
		})
	}
}

// TestFleetCloseSendsTheLastCounts: Close sends the counts made since the
// last flush in one round trip, and says it could.
func TestFleetCloseSendsTheLastCounts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newMemStore()
		b := sharedFleet(t, store, 1, breaker.ConsecutiveFailures(0), breaker.FailureRate(0.5, 100))[0]
		time.Sleep(sharedFlush + sharedFlush/2) // the first flush
		calls(b, 4, ok)
		calls(b, 3, failed)
		before := store.syncs.Load()
		require.NoError(t, b.Close())
		assert.EqualValues(t, 1, store.syncs.Load()-before, "one flush: nothing was left after it")
		fleet := fleetStatus(t, b)
		assert.Equal(t, breaker.FleetStatus{State: resilience.StateClosed, Generation: fleet.Generation, Requests: 7, Failures: 3}, fleet)
	})
}

// TestFleetCloseRoundTripWithinItsBound: a store that takes a moment to
// answer still gets Close's flush, which is bounded by two flush
// intervals, not by nothing.
func TestFleetCloseRoundTripWithinItsBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newMemStore()
		slow := slowLink{watchingStore: watchingStore{memStore: store}, down: sharedFlush / 2}
		b := sharedFleet(t, slow, 1, breaker.ConsecutiveFailures(0), breaker.FailureRate(0.5, 100))[0]
		time.Sleep(sharedFlush + sharedFlush/2)
		calls(b, 5, ok)
		require.NoError(t, b.Close())
		fleet := fleetStatus(t, b)
		assert.EqualValues(t, 5, fleet.Requests)
	})
}

// TestFleetCountsOnceWhatFailedFlushesLeft: a flush that failed, then one
// applied whose answer was lost: the batch is sent until acknowledged and
// counted once, and Close sends what was left behind it, failures only
// included. The events say the store was unavailable, then restored.
func TestFleetCountsOnceWhatFailedFlushesLeft(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newMemStore()
		events := fleetEvents()
		b := sharedFleet(t, store, 1, breaker.ConsecutiveFailures(0), breaker.FailureRate(0.5, 100), breaker.WithListener(events))[0]
		start := time.Now()
		at(start, 150*time.Millisecond) // the first flush: the generation is known
		calls(b, 6, ok)
		calls(b, 4, failed)
		store.fail.Store(true) // the flush at 200 ms fails
		at(start, 250*time.Millisecond)
		store.fail.Store(false)
		store.lose.Store(1) // the one at 300 ms is applied, its answer lost
		at(start, 350*time.Millisecond)
		calls(b, 3, failed) // left behind the batch in flight
		require.NoError(t, b.Close())
		fleet := fleetStatus(t, b)
		assert.EqualValues(t, 13, fleet.Requests)
		assert.EqualValues(t, 7, fleet.Failures)
		assert.Equal(t, []string{"shared_state_unavailable", "shared_state_restored"}, events.list())
	})
}

// TestFleetDropsABatchOlderThanTheWindow: a batch the store could not take
// is sent again while it is at most a window old (1 s here), and dropped
// after: its counts are outside the window.
func TestFleetDropsABatchOlderThanTheWindow(t *testing.T) {
	tests := []struct {
		name    string
		back    time.Duration // when the store answers again
		counted uint64
	}{
		{"sent again exactly a window after it was formed", 1150 * time.Millisecond, 3},
		{"dropped a flush interval later", 1250 * time.Millisecond, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store := newMemStore()
				b := sharedFleet(t, store, 1, breaker.ConsecutiveFailures(0), breaker.Window(time.Second, 10))[0]
				start := time.Now()
				at(start, 150*time.Millisecond)
				calls(b, 3, ok)
				store.fail.Store(true) // the batch formed at 200 ms fails until the store is back
				at(start, tt.back)
				store.fail.Store(false)
				time.Sleep(sharedFlush)
				fleet := fleetStatus(t, b)
				assert.Equal(t, tt.counted, fleet.Requests)
			})
		})
	}
}

// TestFleetRestoresTheOpenTimerAfterAnEmptyRestart: a store restarted
// empty 600 ms after the fleet opened takes the open state back from the
// replica as opened when the replica heard it (at 100 ms), under a new
// generation: still open at 1050 ms, half-open from 1100 ms, as if
// nothing had happened.
func TestFleetRestoresTheOpenTimerAfterAnEmptyRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newMemStore()
		b := sharedFleet(t, store, 1, breaker.ConsecutiveFailures(0))[0]
		start := time.Now()
		calls(b, 10, failed)
		at(start, 150*time.Millisecond)
		require.Equal(t, resilience.StateOpen, b.FleetState())
		_, opened := store.state("shared")
		at(start, 700*time.Millisecond)
		store.forget()
		p := breaker.FleetPolicy{Window: 10 * time.Second, Buckets: 10, OpenTimeout: sharedOpen}
		at(start, 1050*time.Millisecond)
		st, err := store.Read(t.Context(), "shared", p)
		require.NoError(t, err)
		assert.Equal(t, resilience.StateOpen, st.State, "restored, still open")
		assert.Greater(t, st.Generation, opened, "under a generation never used")
		at(start, 1150*time.Millisecond)
		st, err = store.Read(t.Context(), "shared", p)
		require.NoError(t, err)
		assert.Equal(t, resilience.StateHalfOpen, st.State, "half-open an open timeout after the opening")
		assert.Equal(t, resilience.StateHalfOpen, b.FleetState())
	})
}

// TestFleetRestoresAHalfOpenStateHeardLate: a replica that started while
// the fleet was half-open gives a store restarted empty the half-open
// state back at once, though it heard of it less than an open timeout
// ago.
func TestFleetRestoresAHalfOpenStateHeardLate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newMemStore()
		first := sharedFleet(t, store, 1, breaker.ConsecutiveFailures(0))[0]
		calls(first, 10, failed)
		require.NoError(t, first.Close()) // its last flush opens the fleet at 0
		time.Sleep(sharedOpen + sharedFlush/2)
		late := sharedFleet(t, store, 1, breaker.ConsecutiveFailures(0))[0]
		time.Sleep(sharedFlush + sharedFlush/2)
		require.Equal(t, resilience.StateHalfOpen, late.FleetState())
		store.forget()
		time.Sleep(sharedFlush)
		assert.Equal(t, resilience.StateHalfOpen, fleetStatus(t, late).State)
	})
}

// TestFleetLearnsAnOpeningFromItsWatcher: with a flush interval of 2 s, a
// replica learns that another opened the fleet at once, from its store's
// watcher, and rejects the next call.
func TestFleetLearnsAnOpeningFromItsWatcher(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := watchingStore{memStore: newMemStore()}
		events := fleetEvents()
		a := sharedFleet(t, store, 1, breaker.ConsecutiveFailures(0), breaker.FlushInterval(2*time.Second))[0]
		b := sharedFleet(t, store, 1, breaker.ConsecutiveFailures(0), breaker.FlushInterval(2*time.Second),
			breaker.WithListener(events))[0]
		synctest.Wait() // watching
		calls(a, 10, failed)
		start := time.Now()
		require.NoError(t, a.Close()) // its last flush opens the fleet
		synctest.Wait()
		assert.Zero(t, time.Since(start))
		assert.Equal(t, resilience.StateOpen, b.FleetState())
		assert.ErrorIs(t, b.Execute(t.Context(), ok), breaker.ErrOpen)
		assert.Equal(t, []string{"closed->open"}, events.list())
	})
}

// TestFleetIgnoresALateMessageOfAChangeItHeard: the watcher's message of
// the opening comes 1.5 s late, after the replica heard the opening from
// its own flush and the fleet turned half-open: it changes nothing.
func TestFleetIgnoresALateMessageOfAChangeItHeard(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := watchingStore{memStore: newMemStore(), delay: 1500 * time.Millisecond}
		events := fleetEvents()
		b := sharedFleet(t, store, 1, breaker.ConsecutiveFailures(0), breaker.WithListener(events))[0]
		start := time.Now()
		calls(b, 10, failed)
		at(start, 1650*time.Millisecond) // the message came at 1600 ms
		assert.Equal(t, resilience.StateHalfOpen, b.FleetState())
		assert.Equal(t, []string{"closed->open", "open->half-open"}, events.list())
	})
}

// TestFleetSlowAnswerDoesNotUndoAWatchedOpening: a flush's answer that
// the store gave before the fleet opened arrives after the watcher told
// the opening: the replica keeps the opening.
func TestFleetSlowAnswerDoesNotUndoAWatchedOpening(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := watchingStore{memStore: newMemStore()}
		b := sharedFleet(t, slowLink{watchingStore: store, down: 80 * time.Millisecond}, 1, breaker.ConsecutiveFailures(0))[0]
		start := time.Now()
		at(start, 60*time.Millisecond)
		a := sharedFleet(t, store, 1, breaker.ConsecutiveFailures(0))[0] // flushes at 160 ms, 260 ms, ...
		calls(a, 10, failed)
		at(start, 170*time.Millisecond) // a's flush opened the fleet; b's of 100 ms, answered closed, is on its way
		require.Equal(t, resilience.StateOpen, b.FleetState(), "heard from the watcher")
		at(start, 190*time.Millisecond) // the answer came
		assert.Equal(t, resilience.StateOpen, b.FleetState())
		assert.ErrorIs(t, b.Execute(t.Context(), ok), breaker.ErrOpen)
	})
}

// TestFleetSlowRequestTakesTheStateItFinds: a flush sent before the fleet
// opened reaches the store 1.2 s later, when the fleet, whose opening the
// watcher told meanwhile, is half-open: the replica takes that state from
// the answer, not at its next flush.
func TestFleetSlowRequestTakesTheStateItFinds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := watchingStore{memStore: newMemStore()}
		opts := []breaker.Option{breaker.ConsecutiveFailures(0), breaker.FlushInterval(2 * time.Second)}
		a := sharedFleet(t, store, 1, opts...)[0]
		b := sharedFleet(t, slowLink{watchingStore: store, up: 1200 * time.Millisecond, down: 300 * time.Millisecond}, 1, opts...)[0]
		start := time.Now()
		at(start, 2050*time.Millisecond) // b's flush of 2 s is on its way
		calls(a, 10, failed)
		at(start, 2100*time.Millisecond)
		require.NoError(t, a.Close()) // the fleet opens at 2.1 s
		synctest.Wait()
		require.Equal(t, resilience.StateOpen, b.FleetState(), "heard from the watcher")
		at(start, 3600*time.Millisecond) // the store saw b's flush at 3.2 s: half-open
		assert.Equal(t, resilience.StateHalfOpen, b.FleetState())
	})
}

// TestFleetRunningProbeKeepsItsGrant: with an open timeout (40 ms) shorter
// than a flush interval, a probe that runs for several flush intervals
// keeps the fleet's only grant: the grant lasts three flush intervals from
// each renewal, not the open timeout, and the other replica never probes
// meanwhile, until the probe has been out for 10 open timeouts
// (TestFleetOverdueProbeLetsAnotherGo).
func TestFleetRunningProbeKeepsItsGrant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b, start := grantedFleet(t)
		release := make(chan struct{})
		var probing, overlapped atomic.Bool
		done := make(chan error)
		go func() {
			done <- a.Execute(t.Context(), func(context.Context) error {
				probing.Store(true)
				defer probing.Store(false)
				<-release
				return nil
			})
		}()
		synctest.Wait()
		require.True(t, probing.Load(), "a probes")
		at(start, 250*time.Millisecond)
		for time.Since(start) < 600*time.Millisecond { // a's probe out for 390 ms, under 10 open timeouts
			_ = b.Execute(t.Context(), func(context.Context) error {
				overlapped.Store(probing.Load())
				return nil
			})
			time.Sleep(10 * time.Millisecond)
		}
		close(release)
		require.NoError(t, <-done)
		assert.False(t, overlapped.Load(), "b probed while a's probe ran")
		time.Sleep(2*sharedFlush + sharedFlush/2) // a's next flush reports it, b's after hears it
		assert.NoError(t, b.Execute(t.Context(), ok), "a's probe closed the fleet")
	})
}

// TestFleetOverdueProbeLetsAnotherGo: a fleet probe that never answers
// (its caller has no deadline) held the fleet half-open, and every call
// of every replica rejected, for as long as it hung: its replica renewed
// the grant at each flush. Once it has been out for 10 open timeouts it
// no longer does, and another probe goes (here the other replica's, the
// one that wants it), whose success closes the fleet.
func TestFleetOverdueProbeLetsAnotherGo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b, _ := grantedFleet(t)
		hang, stop := context.WithCancel(t.Context())
		defer stop()
		started := make(chan struct{})
		go func() {
			_ = a.Execute(hang, func(ctx context.Context) error {
				close(started)
				<-ctx.Done()
				return ctx.Err()
			})
		}()
		<-started
		probed := time.Now()
		for b.Execute(t.Context(), ok) != nil {
			require.Less(t, time.Since(probed), 10*40*time.Millisecond+5*sharedFlush, "another probe went")
			time.Sleep(10 * time.Millisecond)
		}
		require.GreaterOrEqual(t, time.Since(probed), 10*40*time.Millisecond, "not before the probe was overdue")
		time.Sleep(3 * sharedFlush)
		require.Equal(t, resilience.StateClosed, a.FleetState())
		require.NoError(t, a.Execute(t.Context(), ok))
	})
}

// grantedFleet returns two replicas on one store with an open timeout of
// 40 ms, shorter than a flush interval, and when it began: a's failures
// open the fleet at 100 ms, and a is granted its probe at its flush at
// 200 ms (half-open from 140 ms); it returns at 210 ms.
func grantedFleet(t *testing.T) (a, b *breaker.Breaker, start time.Time) {
	store := newMemStore()
	bs := sharedFleet(t, store, 2, breaker.ConsecutiveFailures(0), breaker.OpenTimeout(40*time.Millisecond))
	a, b = bs[0], bs[1]
	start = time.Now()
	calls(a, 10, failed)
	at(start, 120*time.Millisecond)
	require.ErrorIs(t, a.Execute(t.Context(), ok), breaker.ErrOpen)
	at(start, 210*time.Millisecond)
	return a, b, start
}

// pair returns two replicas on one store, the second made lag after the
// first: the first's own breaker opens at its first failure, the other's
// never.
func pair(t *testing.T, lag time.Duration) (*breaker.Breaker, *breaker.Breaker) {
	store := newMemStore()
	first := sharedFleet(t, store, 1, breaker.ConsecutiveFailures(1))[0]
	time.Sleep(lag)
	return first, sharedFleet(t, store, 1, breaker.ConsecutiveFailures(0))[0]
}

// TestFleetProbeGoesToAReplicaThatCanReachTheDependency: a replica whose
// own breaker is half-open (it could not reach the dependency) and one
// whose own breaker is closed both want the fleet's probe: the closed one
// gets it, though the other asked first (its flushes come 50 ms before).
func TestFleetProbeGoesToAReplicaThatCanReachTheDependency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		cut, good := pair(t, 50*time.Millisecond)
		calls(cut, 1, failed)   // its own breaker opens at 50 ms, half-open from 1050 ms
		calls(good, 10, failed) // good's flush at 150 ms opens the fleet: half-open from 1150 ms
		at(start, 950*time.Millisecond)
		var first atomic.Pointer[string]
		var wg sync.WaitGroup
		for name, b := range map[string]*breaker.Breaker{"cut": cut, "good": good} {
			wg.Go(func() {
				for time.Since(start) < 1300*time.Millisecond {
					_ = b.Execute(t.Context(), func(context.Context) error {
						first.CompareAndSwap(nil, &name)
						return nil
					})
					time.Sleep(10 * time.Millisecond)
				}
			})
		}
		wg.Wait()
		require.NotNil(t, first.Load())
		assert.Equal(t, "good", *first.Load(), "the first call to reach the dependency")
		assert.Equal(t, resilience.StateClosed, good.FleetState())
	})
}

// TestFleetProbeRejectedByTheOwnBreakerIsGivenBack: a replica granted the
// fleet's probe while its own half-open breaker's probe runs has the call
// rejected by its own breaker: the permit is kept for its next call, which
// probes for the fleet as soon as its own probe is done; and the replica
// probes again when the fleet opens again.
func TestFleetProbeRejectedByTheOwnBreakerIsGivenBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, other := pair(t, 0)
		start := time.Now()
		calls(a, 1, failed) // a's own breaker opens: half-open at 1 s
		at(start, 1010*time.Millisecond)
		release := make(chan struct{})
		own := make(chan error)
		go func() { // a's own probe, admitted by the closed fleet
			own <- a.Execute(t.Context(), func(context.Context) error { <-release; return nil })
		}()
		synctest.Wait()
		calls(other, 10, failed) // the fleet opens at 1.1 s, half-open at 2.1 s
		for time.Since(start) < 2150*time.Millisecond {
			require.Error(t, a.Execute(t.Context(), ok)) // wants the fleet's probe
			time.Sleep(20 * time.Millisecond)
		}
		require.ErrorIs(t, a.Execute(t.Context(), ok), breaker.ErrTooManyRequests, "its own breaker's probe runs")
		close(release)
		require.NoError(t, <-own)
		require.NoError(t, a.Execute(t.Context(), ok), "the fleet's probe, on the permit given back")
		time.Sleep(sharedFlush) // reported at the next flush
		synctest.Wait()
		require.Equal(t, resilience.StateClosed, a.FleetState())

		time.Sleep(sharedFlush) // the other replica hears it
		calls(other, 10, failed)
		time.Sleep(2 * sharedFlush)
		require.Equal(t, resilience.StateOpen, a.FleetState(), "open again")
		reopened := time.Now()
		for a.Execute(t.Context(), ok) != nil {
			require.Less(t, time.Since(reopened), sharedOpen+5*sharedFlush, "a never probed again")
			time.Sleep(20 * time.Millisecond)
		}
	})
}

// TestFleetFirstCallAfterTheOwnTimeoutWantsTheProbe: the first call after
// a replica's own breaker's open timeout, rejected by the open fleet,
// asks for the fleet's probe (its own breaker is half-open now): granted
// at the flush that finds the fleet half-open, it is the next call's.
func TestFleetFirstCallAfterTheOwnTimeoutWantsTheProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		events := fleetEvents()
		b := sharedFleet(t, newMemStore(), 1, breaker.ConsecutiveFailures(1), breaker.FailureRate(0.5, 1), breaker.WithListener(events))[0]
		start := time.Now()
		calls(b, 1, failed) // both open: its own at 0, the fleet at 100 ms
		at(start, 1050*time.Millisecond)
		require.ErrorIs(t, b.Execute(t.Context(), ok), breaker.ErrOpen, "the fleet is open")
		at(start, 1150*time.Millisecond)
		require.NoError(t, b.Execute(t.Context(), ok))
		time.Sleep(sharedFlush) // reported at the next flush
		synctest.Wait()
		assert.Equal(t, []string{"closed->open", "open->half-open", "half-open->closed"}, events.list())
	})
}

// TestFleetCanceledProbeGivesItsPermitBack: a probe whose caller cancels
// counts for nothing: the replica's next call is the probe.
func TestFleetCanceledProbeGivesItsPermitBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := sharedFleet(t, newMemStore(), 1, breaker.ConsecutiveFailures(0))[0]
		start := time.Now()
		calls(b, 10, failed)
		at(start, 1050*time.Millisecond)
		require.ErrorIs(t, b.Execute(t.Context(), ok), breaker.ErrOpen)
		at(start, 1150*time.Millisecond)
		ctx, cancel := context.WithCancel(t.Context())
		require.ErrorIs(t, b.Execute(ctx, func(ctx context.Context) error { cancel(); return ctx.Err() }), context.Canceled)
		require.NoError(t, b.Execute(t.Context(), ok), "the next call probes")
		time.Sleep(sharedFlush) // reported at the next flush
		synctest.Wait()
		assert.Equal(t, resilience.StateClosed, b.FleetState())
	})
}

// TestFleetUnconfirmedStateEdge: with the store hanging, the open state
// heard at 100 ms holds for exactly the staleness bound (OpenTimeout
// here), and the replica decides alone just after, with one event.
func TestFleetUnconfirmedStateEdge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newMemStore()
		events := fleetEvents()
		b := sharedFleet(t, store, 1, breaker.ConsecutiveFailures(0), breaker.OpenTimeout(10*time.Second), breaker.WithListener(events))[0]
		start := time.Now()
		calls(b, 10, failed)
		at(start, 150*time.Millisecond)
		store.hang.Store(true)
		at(start, 100*time.Millisecond+10*time.Second)
		assert.Equal(t, resilience.StateOpen, b.FleetState(), "confirmed exactly OpenTimeout ago")
		time.Sleep(time.Nanosecond)
		assert.Equal(t, resilience.StateClosed, b.FleetState(), "unconfirmed")
		assert.NoError(t, b.Execute(t.Context(), ok))
		assert.Contains(t, events.list(), "shared_state_unavailable")
	})
}

// TestFleetWithoutAReader: Fleet says why it cannot tell; FleetState of a
// breaker that is not shared is closed.
func TestFleetWithoutAReader(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var nothing *breaker.Breaker
		_, err := nothing.Fleet(t.Context())
		assert.ErrorContains(t, err, "not shared")
		_, err = breaker.New("local").Fleet(t.Context())
		assert.ErrorContains(t, err, "not shared")
		assert.Equal(t, resilience.StateClosed, breaker.New("local").FleetState())
		b := sharedFleet(t, syncOnly{newMemStore()}, 1)[0]
		_, err = b.Fleet(t.Context())
		assert.ErrorContains(t, err, "cannot read")
	})
}

// syncOnly is a store that is only a breaker.SharedStore.
type syncOnly struct{ s *memStore }

func (o syncOnly) Sync(ctx context.Context, name string, s breaker.Sync) (breaker.Fleet, error) {
	return o.s.Sync(ctx, name, s)
}

// slowLink is a store behind a slow link: a flush reaches it up after it
// was sent, and its answer comes down later. The watcher's messages are
// not delayed.
type slowLink struct {
	watchingStore
	up, down time.Duration
}

func (l slowLink) Sync(ctx context.Context, name string, s breaker.Sync) (breaker.Fleet, error) {
	if err := pause(ctx, l.up); err != nil {
		return breaker.Fleet{}, err
	}
	got, err := l.watchingStore.Sync(ctx, name, s)
	if err != nil {
		return got, err
	}
	return got, pause(ctx, l.down)
}

// pause waits d, or until ctx is done.
func pause(ctx context.Context, d time.Duration) error {
	waited := errors.New("waited")
	wait, cancel := context.WithTimeoutCause(ctx, d, waited)
	defer cancel()
	<-wait.Done()
	if context.Cause(wait) == waited {
		return nil
	}
	return ctx.Err()
}

// TestFleetProbeEndingDuringCloseIsReported: a probe that succeeds while
// Close's flush is on its way (a slow link, 40 ms down) is reported by one
// more flush: the fleet closes.
func TestFleetProbeEndingDuringCloseIsReported(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newMemStore()
		b := sharedFleet(t, slowLink{watchingStore: watchingStore{memStore: store}, down: 40 * time.Millisecond}, 1,
			breaker.ConsecutiveFailures(0), breaker.OpenTimeout(1050*time.Millisecond))[0]
		start := time.Now()
		calls(b, 10, failed)             // open at 100 ms (the watcher tells it at once), half-open at 1150 ms
		at(start, 1050*time.Millisecond) // before the tick of 1100 ms, which moves to 1150 ms
		require.ErrorIs(t, b.Execute(t.Context(), ok), breaker.ErrOpen)
		at(start, 1200*time.Millisecond) // granted by the flush of 1150 ms
		release := make(chan struct{})
		probe := make(chan error)
		go func() { probe <- b.Execute(t.Context(), func(context.Context) error { <-release; return nil }) }()
		at(start, 1250*time.Millisecond)
		closed := make(chan error)
		go func() { closed <- b.Close() }()
		at(start, 1270*time.Millisecond) // Close's flush is on its way
		close(release)
		require.NoError(t, <-probe)
		require.NoError(t, <-closed)
		st, _ := store.state("shared")
		assert.Equal(t, resilience.StateClosed, st, "the probe's success reached the store")
	})
}

// TestFleetFlushesWhenItTurnsHalfOpen: a replica whose calls, by its tick
// before, wanted the probe within two flush intervals of the moment the
// fleet turns half-open (an open timeout after it heard the opening:
// 1150 ms here, between two ticks) moves that tick to that moment, and is
// granted the probe then; one whose last call is older keeps its ticks.
func TestFleetFlushesWhenItTurnsHalfOpen(t *testing.T) {
	tests := []struct {
		name     string
		rejected time.Duration // the last call before the fleet is half-open
		at1160   error         // a call at 1160 ms; if rejected, the one at 1210 ms probes
	}{
		{"a call 80 ms before, before the tick of 1100 ms: granted at 1150 ms", 1070 * time.Millisecond, nil},
		{"a call exactly two intervals before: no flush until 1200 ms", 950 * time.Millisecond, breaker.ErrOpen},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := sharedFleet(t, newMemStore(), 1, breaker.ConsecutiveFailures(0), breaker.OpenTimeout(1050*time.Millisecond))[0]
				start := time.Now()
				calls(b, 10, failed)
				at(start, tt.rejected)
				require.ErrorIs(t, b.Execute(t.Context(), ok), breaker.ErrOpen)
				at(start, 1160*time.Millisecond)
				err := b.Execute(t.Context(), ok)
				if tt.at1160 == nil {
					require.NoError(t, err)
					return
				}
				require.ErrorIs(t, err, tt.at1160)
				at(start, 1210*time.Millisecond)
				require.NoError(t, b.Execute(t.Context(), ok))
			})
		})
	}
}
