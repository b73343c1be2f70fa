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
