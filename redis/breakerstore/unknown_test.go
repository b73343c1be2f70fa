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

// TestUnknownGenerationCountsThatPredateAChangeAreDropped: counts of a
// replica that had heard no generation count as the current one's if
// they began after the fleet's last change of state, and not if they
// began before it; and the store's answer says how long ago that change
// was.
func TestUnknownGenerationCountsThatPredateAChangeAreDropped(t *testing.T) {
	srv := redistest.Start(t)
	store := breakerstore.New(srv.Client(), "test:")
	name := fleetName(t)
	p := breaker.FleetPolicy{Window: 10 * time.Second, Buckets: 10, OpenTimeout: 30 * time.Millisecond, Rate: 0.5, MinRequests: 10,
		HalfOpenRequests: 1, ProbeTimeout: time.Second, FlushInterval: 100 * time.Millisecond}
	ctx := context.Background()
	first, err := store.Sync(ctx, name, breaker.Sync{Policy: p})
	require.NoError(t, err)
	assert.Zero(t, first.ChangedFor, "no change yet")
	opened, err := store.Sync(ctx, name, breaker.Sync{Batch: "a-1", Requests: 10, Failures: 10, Generation: first.Generation, Policy: p})
	require.NoError(t, err)
	require.Equal(t, resilience.StateOpen, opened.State)
	time.Sleep(40 * time.Millisecond) // half-open
	half, err := store.Sync(ctx, name, breaker.Sync{Generation: opened.Generation, State: resilience.StateOpen, WantProbe: true, Replica: "a", Policy: p})
	require.NoError(t, err)
	require.Equal(t, resilience.StateHalfOpen, half.State)
	require.True(t, half.ProbeGranted)
	closed, err := store.Sync(ctx, name, breaker.Sync{Batch: "a-2", ProbeSuccesses: 1, Generation: half.Generation, State: resilience.StateHalfOpen, Replica: "a", Policy: p})
	require.NoError(t, err)
	require.Equal(t, resilience.StateClosed, closed.State, "the probe closed it")
	time.Sleep(50 * time.Millisecond)

	got, err := store.Sync(ctx, name, breaker.Sync{Batch: "b-1", Requests: 7, Failures: 7, GenerationUnknown: true, CountsAge: time.Second, Policy: p})
	require.NoError(t, err)
	assert.InDelta(t, 50*time.Millisecond, got.ChangedFor, float64(40*time.Millisecond), "the closing, as long ago as it was")
	st, err := store.Read(ctx, name, p)
	require.NoError(t, err)
	assert.Zero(t, st.Requests, "begun before the closing: dropped")

	_, err = store.Sync(ctx, name, breaker.Sync{Batch: "b-2", Requests: 3, GenerationUnknown: true, CountsAge: 10 * time.Millisecond, Policy: p})
	require.NoError(t, err)
	st, err = store.Read(ctx, name, p)
	require.NoError(t, err)
	assert.EqualValues(t, 3, st.Requests, "begun after it: the current generation's")
}
