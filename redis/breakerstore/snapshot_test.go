package breakerstore_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/redis/breakerstore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// TestFleetRestoredFromAnOlderSnapshotDoesNotReopen: Redis restarts from
// a snapshot (RDB) taken before an outage, so its generation goes back to
// one that a replica cut off through the outage still holds, with the
// failures it gathered then; the fleet recovered meanwhile. A replica that
// reports a newer generation than the store's tells it that it lost
// state: a new generation, never used before, and the cut-off replica's
// old failures (older than the window) are not sent: the recovered fleet
// does not reopen on a healthy dependency.
func TestFleetRestoredFromAnOlderSnapshotDoesNotReopen(t *testing.T) {
	srv := redistest.Start(t)
	link := redistest.NewProxy(t, srv.Addr())
	cut := redis.NewClient(&redis.Options{Addr: link.Addr(), ContextTimeoutEnabled: true})
	defer cut.Close()
	replica := func(c redis.UniversalClient) *breaker.Breaker {
		b := breaker.New("snapshot", breaker.Shared(breakerstore.New(c, "")), breaker.FlushInterval(fleetFlush),
			breaker.FailureRate(0.5, 5), breaker.Window(time.Second, 10),
			breaker.OpenTimeout(500*time.Millisecond), breaker.ConsecutiveFailures(0))
		t.Cleanup(func() { _ = b.Close() })
		return b
	}
	a, r := replica(srv.Client()), replica(cut)
	var failing atomic.Bool
	dep := func(context.Context) error {
		if failing.Load() {
			return errors.New("down")
		}
		return nil
	}
	ctx := context.Background()
	var ok, rejected atomic.Int64
	run := func(b *breaker.Breaker, d time.Duration) {
		for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(2 * time.Millisecond) {
			if err := b.Execute(ctx, dep); err == nil {
				ok.Add(1)
			} else if breaker.IsRejection(err) {
				rejected.Add(1)
			}
		}
	}
	both := func(d time.Duration) {
		done := make(chan struct{})
		go func() { defer close(done); run(r, d) }()
		run(a, d)
		<-done
	}
	both(400 * time.Millisecond) // both know the generation
	before, err := a.Fleet(ctx)
	require.NoError(t, err)
	for before.Generation == 0 || before.Requests == 0 { // a loaded machine
		both(100 * time.Millisecond)
		before, err = a.Fleet(ctx)
		require.NoError(t, err)
	}
	both(2 * fleetFlush)
	require.NoError(t, srv.Client().Save(ctx).Err(), "the snapshot")

	link.Cut() // r is cut off from Redis through the outage
	failing.Store(true)
	deadline := time.Now().Add(5 * time.Second)
	for a.FleetState() == resilience.StateClosed {
		require.True(t, time.Now().Before(deadline), "the fleet opened")
		both(50 * time.Millisecond)
	}
	both(300 * time.Millisecond)
	failing.Store(false)
	for a.FleetState() != resilience.StateClosed || a.Execute(ctx, dep) != nil {
		require.True(t, time.Now().Before(deadline), "the fleet recovered")
		run(a, 20*time.Millisecond)
	}
	run(a, 200*time.Millisecond)
	recovered, err := a.Fleet(ctx)
	require.NoError(t, err)
	require.Equal(t, resilience.StateClosed, recovered.State)
	require.Greater(t, recovered.Generation, before.Generation, "the outage opened and closed the fleet")

	srv.Kill() // a crash, and a restart from the snapshot
	srv.Restart()
	link.Heal()
	ok.Store(0)
	rejected.Store(0)
	run(a, 1500*time.Millisecond)
	after, err := a.Fleet(ctx)
	require.NoError(t, err)
	t.Logf("generations: snapshot %d, recovered %d, after the restore %+v; %d calls served, %d rejected",
		before.Generation, recovered.Generation, after, ok.Load(), rejected.Load())
	assert.Zero(t, rejected.Load(), "calls rejected with the dependency healthy")
	assert.Equal(t, resilience.StateClosed, after.State)
	assert.Greater(t, after.Generation, recovered.Generation, "a generation never used before")
}
