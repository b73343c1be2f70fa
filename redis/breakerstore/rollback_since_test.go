package breakerstore_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/redis/breakerstore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// A store that went back in time (an older snapshot: no :since yet, an old
// generation) takes a new generation when a replica reports a later one:
// a change of state like any other. Counts of an unknown generation that
// began long before it must not count in it, as the counts of a known old
// generation do not (they would reopen the fleet).
func TestARollbackCountsAsAChange(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	store := breakerstore.New(c, "test:")
	name := fleetName(t)
	k := "test:{" + name + "}"
	p := breaker.FleetPolicy{Window: 10 * time.Second, Buckets: 10, OpenTimeout: 30 * time.Millisecond, Rate: 0.5, MinRequests: 10,
		HalfOpenRequests: 1, ProbeTimeout: time.Second, FlushInterval: 100 * time.Millisecond}
	ctx := context.Background()
	first, err := store.Sync(ctx, name, breaker.Sync{Policy: p})
	require.NoError(t, err)
	opened, err := store.Sync(ctx, name, breaker.Sync{Batch: "a-1", Requests: 10, Failures: 10, Generation: first.Generation, Policy: p})
	require.NoError(t, err)
	require.Equal(t, resilience.StateOpen, opened.State)
	time.Sleep(40 * time.Millisecond)
	half, err := store.Sync(ctx, name, breaker.Sync{Generation: opened.Generation, State: resilience.StateOpen, WantProbe: true, Replica: "a", Policy: p})
	require.NoError(t, err)
	require.True(t, half.ProbeGranted)
	closed, err := store.Sync(ctx, name, breaker.Sync{Batch: "a-2", ProbeSuccesses: 1, Generation: half.Generation, State: resilience.StateHalfOpen, Replica: "a", Policy: p})
	require.NoError(t, err)
	require.Equal(t, resilience.StateClosed, closed.State)

	// Restored from a snapshot taken before any change.
	require.NoError(t, c.Set(ctx, k+":gen", first.Generation, 0).Err())
	require.NoError(t, c.Del(ctx, k+":since", k+":open").Err())
	time.Sleep(5 * time.Millisecond)
	back, err := store.Sync(ctx, name, breaker.Sync{Generation: closed.Generation, Replica: "a", Policy: p})
	require.NoError(t, err)
	require.Greater(t, back.Generation, closed.Generation, "rolled back: a new generation")
	assert.NotZero(t, back.ChangedFor, "the rollback is a change of generation")

	// A replica cut off from its start, through the outage, back now.
	late, err := store.Sync(ctx, name, breaker.Sync{Batch: "b-1", Requests: 10, Failures: 10, GenerationUnknown: true,
		CountsAge: time.Minute, Replica: "b", Policy: p})
	require.NoError(t, err)
	assert.Equal(t, resilience.StateClosed, late.State, "an outage's counts from before the rollback reopened the fleet")
}

// TestARollbackClearsTheCountsOfTheGenerationItEnds: the fleet
// gathers failures (19 of 19, MinRequests 20: not yet open); an RDB
// snapshot is taken; the fleet opens, a probe closes it (dependency
// healthy). Redis crashes and restarts from the snapshot: its generation
// and its buckets (19 failures) go back. The first replica's flush tells
// the store it went back in time (a newer generation): a new generation,
// but the snapshot's buckets, counts of a generation long over, are not
// cleared (buckets are keyed by time, not by generation). One healthy
// call of the new generation makes 20 requests with 19 failures: the
// fleet reopens on a healthy dependency from pre-outage evidence.
func TestARollbackClearsTheCountsOfTheGenerationItEnds(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	store := breakerstore.New(c, "test:")
	name := fleetName(t)
	p := breaker.FleetPolicy{Window: 10 * time.Second, Buckets: 10, OpenTimeout: 50 * time.Millisecond, Rate: 0.5, MinRequests: 20,
		HalfOpenRequests: 1, ProbeTimeout: time.Second, FlushInterval: 100 * time.Millisecond}
	ctx := context.Background()
	first, err := store.Sync(ctx, name, breaker.Sync{GenerationUnknown: true, Replica: "a", Policy: p})
	require.NoError(t, err)
	g0 := first.Generation
	f, err := store.Sync(ctx, name, breaker.Sync{Batch: "a-1", Requests: 19, Failures: 19, Generation: g0, Replica: "a", Policy: p})
	require.NoError(t, err)
	require.Equal(t, resilience.StateClosed, f.State)
	require.NoError(t, c.Save(ctx).Err(), "the snapshot")

	opened, err := store.Sync(ctx, name, breaker.Sync{Batch: "a-2", Requests: 5, Failures: 5, Generation: g0, Replica: "a", Policy: p})
	require.NoError(t, err)
	require.Equal(t, resilience.StateOpen, opened.State)
	time.Sleep(60 * time.Millisecond)
	half, err := store.Sync(ctx, name, breaker.Sync{Generation: opened.Generation, State: resilience.StateOpen, WantProbe: true, Replica: "a", OpenedFor: 60 * time.Millisecond, Policy: p})
	require.NoError(t, err)
	require.True(t, half.ProbeGranted)
	closed, err := store.Sync(ctx, name, breaker.Sync{Batch: "a-3", Requests: 1, ProbeSuccesses: 1, Generation: half.Generation, State: resilience.StateHalfOpen, Replica: "a", Policy: p})
	require.NoError(t, err)
	require.Equal(t, resilience.StateClosed, closed.State, "recovered")

	srv.Kill()
	srv.Restart() // from the snapshot
	var back breaker.Fleet
	require.Eventually(t, func() bool {
		back, err = store.Sync(ctx, name, breaker.Sync{Batch: "a-4", Requests: 1, Generation: closed.Generation, Replica: "a", Policy: p})
		return err == nil
	}, 5*time.Second, 10*time.Millisecond)
	require.Greater(t, back.Generation, closed.Generation, "the rollback was detected: a new generation")
	st, err := store.Read(ctx, name, p)
	require.NoError(t, err)
	t.Logf("after the rollback: %+v (g0 %d, closed %d)", st, g0, closed.Generation)

	// Healthy calls in the new generation.
	next, err := store.Sync(ctx, name, breaker.Sync{Batch: "a-5", Requests: 1, Generation: back.Generation, Replica: "a", Policy: p})
	require.NoError(t, err)
	st, _ = store.Read(ctx, name, p)
	t.Logf("after one healthy call: %+v", st)
	assert.Equal(t, resilience.StateClosed, next.State, "one healthy call reopened the fleet from the snapshot's pre-outage failures")
	assert.EqualValues(t, 0, st.Failures, "the new generation holds failures of a generation the rollback ended")
}

// TestARollbackDoesNotReopenAHealthyFleet: the same with real
// breakers and a healthy dependency after the restore: calls rejected.
func TestARollbackDoesNotReopenAHealthyFleet(t *testing.T) {
	srv := redistest.Start(t)
	bs := replicas(t, srv, 2, breaker.FailureRate(0.5, 20), breaker.Window(10*time.Second, 10),
		breaker.OpenTimeout(200*time.Millisecond), breaker.ConsecutiveFailures(0))
	a, b := bs[0], bs[1]
	ctx := context.Background()
	var failing atomic.Bool
	dep := func(context.Context) error {
		if failing.Load() {
			return errDown
		}
		return nil
	}
	require.Eventually(t, func() bool { st, err := a.Fleet(ctx); return err == nil && st.Generation != 0 }, 3*time.Second, 10*time.Millisecond)
	time.Sleep(2 * flush) // both heard the generation
	failing.Store(true)
	for range 19 {
		_ = a.Execute(ctx, dep)
	}
	require.Eventually(t, func() bool { st, err := a.Fleet(ctx); return err == nil && st.Failures == 19 }, 3*time.Second, 10*time.Millisecond)
	require.NoError(t, srv.Client().Save(ctx).Err(), "the snapshot, the fleet still closed with 19 failures")
	for range 10 {
		_ = b.Execute(ctx, dep)
	}
	require.Eventually(t, func() bool { return a.FleetState() == resilience.StateOpen }, 3*time.Second, 5*time.Millisecond, "the outage opens the fleet")
	failing.Store(false)
	require.Eventually(t, func() bool {
		_ = a.Execute(ctx, dep)
		_ = b.Execute(ctx, dep)
		return a.FleetState() == resilience.StateClosed && b.FleetState() == resilience.StateClosed
	}, 3*time.Second, 5*time.Millisecond, "a probe closes the fleet")
	time.Sleep(2 * flush)

	srv.Kill()
	srv.Restart() // from the snapshot: 19 failures in the window
	// A light, healthy traffic: a call per replica every 40 ms.
	var served, rejected int
	for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); time.Sleep(40 * time.Millisecond) {
		for _, r := range bs {
			err := r.Execute(ctx, dep)
			switch {
			case err == nil:
				served++
			case breaker.IsRejection(err) || errors.Is(err, breaker.ErrOpen):
				rejected++
			}
		}
	}
	st, _ := a.Fleet(ctx)
	t.Logf("after the restore: %d served, %d rejected, fleet %+v", served, rejected, st)
	assert.Zero(t, rejected, "calls to a healthy dependency rejected: the fleet reopened from the snapshot's failures")
}
