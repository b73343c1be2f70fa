package breakerstore_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/redis/breakerstore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/stretchr/testify/require"
)

// From a review: one replica's fleet probe hangs (a connection in a black
// hole, a caller without a deadline). The replica running it said
// ProbeRunning at every flush, the store kept its grant, and the fleet
// stayed half-open: every call of the other replica to the healthy
// dependency was refused (0 of 356 in 40 open timeouts), for as long as
// the probe hung. Once it has been out 10 open timeouts, it no longer
// holds the grant.
func TestReview20AHungFleetProbeDoesNotBlockEveryReplica(t *testing.T) {
	c, _ := redistest.Mini(t)
	store := breakerstore.New(c, "review20:")
	const T = 50 * time.Millisecond
	opts := []breaker.Option{breaker.Shared(store), breaker.FailureRate(0.5, 4), breaker.ConsecutiveFailures(0),
		breaker.Window(2*time.Second, 10), breaker.OpenTimeout(T), breaker.FlushInterval(20 * time.Millisecond)}
	a := breaker.New("dep", opts...)
	b := breaker.New("dep", opts...)
	defer a.Close()
	defer b.Close()
	ctx := context.Background()
	fail := func(context.Context) error { return errors.New("down") }
	for range 10 {
		_ = a.Execute(ctx, fail)
		_ = b.Execute(ctx, fail)
	}
	require.Eventually(t, func() bool { return a.FleetState() == resilience.StateOpen }, 2*time.Second, 5*time.Millisecond)

	// Replica a gets the fleet's probe, which hangs.
	hang := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(hang)
	probing := make(chan struct{})
	var once sync.Once
	deadline := time.Now().Add(3 * time.Second)
	for {
		wg.Go(func() {
			_ = a.Execute(ctx, func(context.Context) error {
				once.Do(func() { close(probing) })
				<-hang
				return nil
			})
		})
		select {
		case <-probing:
		case <-time.After(5 * time.Millisecond):
			require.True(t, time.Now().Before(deadline), "replica a never got the fleet probe")
			continue
		}
		break
	}
	t.Logf("fleet probe running on replica a (fleet %v)", a.FleetState())

	// The dependency is healthy; replica b calls for 40 open timeouts.
	healthy := func(context.Context) error { return nil }
	start := time.Now()
	ok, refused := 0, 0
	var lastErr error
	for time.Since(start) < 40*T {
		if err := b.Execute(ctx, healthy); err == nil {
			ok++
		} else {
			refused++
			lastErr = err
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("replica b over %v (%d open timeouts): %d admitted, %d refused (last: %v); fleet %v", 40*T, 40, ok, refused, lastErr, b.FleetState())
	require.NotZero(t, ok, "every call of replica b refused for 40 open timeouts while the fleet probe hangs; a local breaker lets another probe go after 10")
	require.Equal(t, resilience.StateClosed, b.FleetState(), "another probe closed the fleet")
}
