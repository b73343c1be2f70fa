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
	"github.com/resiliencekit/resiliencekit/resilience"
)

// TestALostStateTakesTheLatestView: the store loses its state (restarted
// empty) and the first flush to reach it was formed before its replica
// heard the fleet's last change, as a flush sent just before the restart
// and sent again by the client once the server is back is. The state it
// restores is a generation old: a replica that knew a later generation
// gives its view instead, open or closed, within a few flush intervals.
// Before, the first flush's view stood: the fleet closed on a dependency
// it had opened on a moment before (1 in 40 runs of
// TestRestartedEmptyWhileOpenStaysOpen under load), or opened on one that
// probes had found back.
func TestALostStateTakesTheLatestView(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	store := breakerstore.New(c, "test:")
	p := breaker.FleetPolicy{Window: 10 * time.Second, Buckets: 10, OpenTimeout: 30 * time.Second, Rate: 0.5, MinRequests: 10,
		HalfOpenRequests: 1, ProbeTimeout: time.Second, FlushInterval: 100 * time.Millisecond}
	ctx := context.Background()
	sync := func(name string, s breaker.Sync) breaker.Fleet {
		t.Helper()
		s.Policy = p
		got, err := store.Sync(ctx, name, s)
		require.NoError(t, err)
		return got
	}
	lose := func() { require.NoError(t, c.FlushAll(ctx).Err()) }

	t.Run("open", func(t *testing.T) {
		name := fleetName(t)
		first := sync(name, breaker.Sync{Replica: "a"})
		opened := sync(name, breaker.Sync{Batch: "a-1", Requests: 10, Failures: 10, Generation: first.Generation, Replica: "a"})
		require.Equal(t, resilience.StateOpen, opened.State)
		time.Sleep(20 * time.Millisecond)
		lose()
		stale := sync(name, breaker.Sync{Generation: first.Generation, Replica: "b"}) // formed before b heard the opening
		require.Equal(t, resilience.StateClosed, stale.State, "restored from b's view")
		got := sync(name, breaker.Sync{Generation: opened.Generation, State: resilience.StateOpen, OpenedFor: time.Second, Replica: "a"})
		assert.Equal(t, resilience.StateOpen, got.State, "a knew the later generation")
		assert.Greater(t, got.Generation, stale.Generation, "a change: a new generation")
		again := sync(name, breaker.Sync{Generation: first.Generation, Replica: "c"})
		assert.Equal(t, resilience.StateOpen, again.State, "an older view changes nothing")
		heard := sync(name, breaker.Sync{Generation: stale.Generation, Replica: "b"}) // b's view is the one it was given back
		assert.Equal(t, resilience.StateOpen, heard.State, "a view of the state taken back changes nothing")
	})

	t.Run("closed", func(t *testing.T) {
		name := fleetName(t)
		first := sync(name, breaker.Sync{Replica: "a"})
		opened := sync(name, breaker.Sync{Batch: "a-1", Requests: 10, Failures: 10, Generation: first.Generation, Replica: "a"})
		require.Equal(t, resilience.StateOpen, opened.State)
		time.Sleep(20 * time.Millisecond) // generations are the store's clock in ms: the restored one is later than a's
		lose()
		stale := sync(name, breaker.Sync{Generation: opened.Generation, State: resilience.StateOpen, OpenedFor: time.Second, Replica: "b"})
		require.Equal(t, resilience.StateOpen, stale.State, "restored from b's view")
		closedGen := opened.Generation + 5 // a probe had closed the fleet: a's view
		require.Less(t, closedGen, stale.Generation)
		got := sync(name, breaker.Sync{Generation: closedGen, State: resilience.StateClosed, Replica: "a"})
		assert.Equal(t, resilience.StateClosed, got.State, "a knew the later generation")
	})

	t.Run("the same view", func(t *testing.T) {
		name := fleetName(t)
		first := sync(name, breaker.Sync{Replica: "a"})
		opened := sync(name, breaker.Sync{Batch: "a-1", Requests: 10, Failures: 10, Generation: first.Generation, Replica: "a"})
		time.Sleep(20 * time.Millisecond)
		lose()
		restored := sync(name, breaker.Sync{Generation: first.Generation, Replica: "b"})
		got := sync(name, breaker.Sync{Generation: opened.Generation, State: resilience.StateClosed, Replica: "a"})
		assert.Equal(t, restored.Generation, got.Generation, "no change when the later view agrees")
	})

	t.Run("after the window", func(t *testing.T) {
		name := fleetName(t)
		first := sync(name, breaker.Sync{Replica: "a"})
		opened := sync(name, breaker.Sync{Batch: "a-1", Requests: 10, Failures: 10, Generation: first.Generation, Replica: "a"})
		time.Sleep(20 * time.Millisecond)
		lose()
		sync(name, breaker.Sync{Generation: first.Generation, Replica: "b"})
		time.Sleep(3*p.FlushInterval + 50*time.Millisecond)
		got := sync(name, breaker.Sync{Generation: opened.Generation, State: resilience.StateOpen, OpenedFor: time.Second, Replica: "a"})
		assert.Equal(t, resilience.StateClosed, got.State, "three flush intervals on, the restored state stands")
	})
}
