package breakerstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/redis/breakerstore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// modeChanges records the mode changes a replica hears.
type modeChanges chan *breaker.ModeChange

func (m modeChanges) OnEvent(e resilience.Event) {
	var mc *breaker.ModeChange
	if errors.As(e.Err, &mc) {
		m <- mc
	}
}

// TestForcedModeIsFleetWide: a mode set on one replica reaches the others
// within a flush or two, and a replica started later takes it too; each
// change is an event naming who made it.
func TestForcedModeIsFleetWide(t *testing.T) {
	srv := redistest.Start(t)
	heard := make(modeChanges, 10)
	bs := replicas(t, srv, 2, breaker.FailureRate(0.5, 10), breaker.WithListener(heard))
	ok := func(context.Context) error { return nil }

	require.NoError(t, bs[0].SetMode(context.Background(), breaker.ForcedOpen, "alice"))
	require.Eventually(t, func() bool {
		return bs[1].Mode().Mode == breaker.ForcedOpen
	}, 5*flush, 10*time.Millisecond, "the other replica takes the mode")
	err := bs[1].Execute(context.Background(), ok)
	assert.ErrorIs(t, err, breaker.ErrForcedOpen)
	assert.Contains(t, err.Error(), "forced open by alice")
	assert.Equal(t, "alice", bs[1].Mode().By)
	assert.Equal(t, breaker.ModeChange{From: breaker.Normal, To: breaker.ForcedOpen, By: "alice"}, *<-heard, "replica 0's own")
	assert.Equal(t, breaker.ModeChange{From: breaker.Normal, To: breaker.ForcedOpen, By: "alice", Fleet: true}, *<-heard, "replica 1's, from the store")

	newcomer := breaker.New(bs[0].Name(), breaker.Shared(breakerstore.New(srv.Client(), "test:")), breaker.FailureRate(0.5, 10), breaker.FlushInterval(flush))
	t.Cleanup(func() { _ = newcomer.Close() })
	require.Eventually(t, func() bool { return newcomer.Mode().Mode == breaker.ForcedOpen }, 5*flush, 10*time.Millisecond,
		"a replica started later takes it")

	require.NoError(t, bs[1].SetMode(context.Background(), breaker.Normal, "bob"))
	require.Eventually(t, func() bool {
		return bs[0].Mode().Mode == breaker.Normal && newcomer.Mode().Mode == breaker.Normal
	}, 5*flush, 10*time.Millisecond)
	assert.NoError(t, bs[0].Execute(context.Background(), ok))
	assert.Equal(t, "bob", bs[0].Mode().By)
	assert.Equal(t, breaker.ModeChange{From: breaker.ForcedOpen, To: breaker.Normal, By: "bob"}, *<-heard, "replica 1's own")
	assert.Equal(t, breaker.ModeChange{From: breaker.ForcedOpen, To: breaker.Normal, By: "bob", Fleet: true}, *<-heard, "replica 0's, from the store")
}
