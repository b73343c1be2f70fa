package breakerstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/redis/breakerstore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
)

// The fleet is forced open; Redis goes down just as the operator sets
// Normal again on replica A (the dashboard says "set on this replica
// only"), and comes back empty. A's flusher writes Normal again once Redis
// answers, and replica B, forced open until then, takes it: a store fault
// does not keep the fleet's calls to a healthy dependency blocked.
func TestNormalSetWhileRedisIsDownReachesTheFleetWhenItIsBack(t *testing.T) {
	srv := redistest.Start(t)
	bs := replicas(t, srv, 2, breaker.FailureRate(0.5, 10))
	a, b := bs[0], bs[1]
	ok := func(context.Context) error { return nil }

	require.NoError(t, a.SetMode(context.Background(), breaker.ForcedOpen, "alice"))
	require.Eventually(t, func() bool { return b.Mode().Mode == breaker.ForcedOpen }, 10*flush, 10*time.Millisecond)

	srv.Kill()
	start := time.Now()
	err := a.SetMode(context.Background(), breaker.Normal, "bob")
	t.Logf("SetMode with Redis down: %v after %v", err, time.Since(start))
	assert.Error(t, err)
	assert.Less(t, time.Since(start), 2*time.Second+500*time.Millisecond, "bounded")
	assert.NoError(t, a.Execute(context.Background(), ok), "A takes it at once")
	time.Sleep(3 * flush)
	assert.Equal(t, breaker.ForcedOpen, b.Mode().Mode)

	srv.Restart() // empty
	require.Eventually(t, func() bool { return b.Mode().Mode == breaker.Normal }, 20*flush, 10*time.Millisecond,
		"Redis is back and B is still %v", b.Mode())
	assert.Equal(t, "bob", b.Mode().By)
	assert.NoError(t, b.Execute(context.Background(), ok))
}

// TestForceVersionIsNotReusedAfterARestart: a server restarted empty does
// not give a new mode the version of one set before: a replica that took
// that one would take the new one for it, and keep the old mode (forced
// open, rejecting every call) for good.
func TestForceVersionIsNotReusedAfterARestart(t *testing.T) {
	srv := redistest.Start(t)
	store := breakerstore.New(srv.Client(), "test:")
	name := fleetName(t)
	p := breaker.FleetPolicy{Window: 10 * time.Second, Buckets: 10, OpenTimeout: time.Second, HalfOpenRequests: 1, FlushInterval: flush}
	ctx := context.Background()
	version := func() uint64 {
		t.Helper()
		var f breaker.Fleet
		require.Eventually(t, func() bool {
			var err error
			f, err = store.Sync(ctx, name, breaker.Sync{GenerationUnknown: true, Policy: p})
			return err == nil
		}, 5*time.Second, 10*time.Millisecond)
		return f.ForceVersion
	}
	require.NoError(t, store.Force(ctx, name, breaker.Forcing{Mode: breaker.ForcedOpen, By: "alice", At: time.Now()}, 0))
	before := version()
	srv.Kill()
	srv.Restart() // empty
	require.Eventually(t, func() bool {
		return store.Force(ctx, name, breaker.Forcing{Mode: breaker.Normal, By: "bob", At: time.Now()}, 0) == nil
	}, 5*time.Second, 10*time.Millisecond)
	assert.Greater(t, version(), before, "the new mode has an older version than the one a replica took")
}

// TestARevokedForcedOpenDoesNotComeBackFromASnapshot: an operator forces
// the fleet open, an RDB snapshot is taken, the operator sets Normal
// again and every replica takes it. Redis is killed and restarts from the
// snapshot: its mode goes back to the revoked forced open, under an older
// version. The replicas keep Normal and write it back, so that a replica
// started after the restore takes Normal too: a forced open that came
// back would reject every call to a healthy dependency until someone
// changed the mode again.
func TestARevokedForcedOpenDoesNotComeBackFromASnapshot(t *testing.T) {
	srv := redistest.Start(t)
	bs := replicas(t, srv, 2, breaker.FailureRate(0.5, 10))
	a, b := bs[0], bs[1]
	ctx := context.Background()
	ok := func(context.Context) error { return nil }

	require.NoError(t, a.SetMode(ctx, breaker.ForcedOpen, "alice"))
	require.Eventually(t, func() bool { return b.Mode().Mode == breaker.ForcedOpen }, 20*flush, 10*time.Millisecond)
	require.NoError(t, srv.Client().Save(ctx).Err(), "the snapshot")
	time.Sleep(5 * time.Millisecond)
	require.NoError(t, a.SetMode(ctx, breaker.Normal, "bob"))
	require.Eventually(t, func() bool { return b.Mode().Mode == breaker.Normal }, 20*flush, 10*time.Millisecond)
	time.Sleep(3 * flush) // both took Normal's version

	srv.Kill()
	srv.Restart() // from the snapshot
	store := breakerstore.New(srv.Client(), "test:")
	require.Eventually(t, func() bool {
		f, _, err := store.Forced(ctx, a.Name())
		return err == nil && f.Mode == breaker.Normal && f.By == "bob"
	}, 3*time.Second, 10*time.Millisecond, "the replicas write back the mode the snapshot lost")
	late := breaker.New(a.Name(), breaker.Shared(store), breaker.FlushInterval(flush), breaker.FailureRate(0.5, 10))
	t.Cleanup(func() { _ = late.Close() })
	time.Sleep(5 * flush)
	for _, r := range []*breaker.Breaker{a, b, late} {
		assert.Equal(t, breaker.Normal, r.Mode().Mode, "a replica took a revoked mode back from the snapshot")
		assert.NoError(t, r.Execute(ctx, ok), "a call to a healthy dependency")
	}
}
