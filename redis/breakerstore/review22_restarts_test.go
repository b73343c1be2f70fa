package breakerstore_test

import (
	"context"
	"crypto/rand"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/redis/breakerstore"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// docs/shared-breaker.md, "Restarted empty": the first replica to flush
// gives back the state it goes by, "as opened as long ago as it has known
// it ..., so the open timer runs on from the opening, not from the
// restart". Redis restarted empty twice in a row (a crash loop), each
// restart within the open timeout: at the second, every replica has known
// the fleet open only since it heard the generation the first restore
// made, and the store restores it as opened then. Each restart moves the
// half-open moment on: the fleet stays open on a healthy dependency for
// as long as Redis keeps restarting (the way out depends on Redis
// recovering first), where the open timeout alone would have let probes
// through OpenTimeout after the opening.
func TestReview22RestartsInARowPostponeTheHalfOpen(t *testing.T) {
	for _, restarts := range []int{0, 4, 8} {
		t.Run(map[int]string{0: "no_restart", 4: "four_restarts", 8: "eight_restarts"}[restarts], func(t *testing.T) {
			first := review22RestartLoop(t, restarts, 450*time.Millisecond)
			t.Logf("%d restarts every 450 ms: first call through %v after the fleet opened (OpenTimeout 1 s)", restarts, first.Round(time.Millisecond))
			assert.Less(t, first, 1500*time.Millisecond, "the open timer runs on from the opening, not from the restart")
		})
	}
}

func review22RestartLoop(t *testing.T, restarts int, every time.Duration) time.Duration {
	srv := startReview22Redis(t)
	name := "rv22-loop-" + rand.Text()[:8]
	const replicas = 3
	var bs []*breaker.Breaker
	for range replicas {
		b := breaker.New(name,
			breaker.FailureRate(0.5, 5), breaker.Window(10*time.Second, 10), breaker.ConsecutiveFailures(0),
			breaker.OpenTimeout(time.Second), breaker.HalfOpenRequests(1),
			breaker.Shared(breakerstore.New(srv.client(), "")), breaker.FlushInterval(50*time.Millisecond))
		bs = append(bs, b)
	}
	defer func() {
		for _, b := range bs {
			_ = b.Close()
		}
	}()
	time.Sleep(200 * time.Millisecond) // every replica heard the fleet's generation
	boom := errors.New("down")
	for range 10 {
		_ = bs[0].Execute(context.Background(), func(context.Context) error { return boom })
	}
	deadline := time.Now().Add(3 * time.Second)
	for {
		open := 0
		for _, b := range bs {
			if b.FleetState() != resilience.StateClosed {
				open++
			}
		}
		if open == replicas {
			break
		}
		require.True(t, time.Now().Before(deadline), "the fleet did not open")
		time.Sleep(5 * time.Millisecond)
	}
	opened := time.Now()

	// Healthy calls from every replica, every 20 ms, from now on.
	var firstThrough atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, b := range bs[1:] { // replicas whose own breaker is closed
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				case <-time.After(20 * time.Millisecond):
				}
				_ = b.Execute(context.Background(), func(context.Context) error {
					firstThrough.CompareAndSwap(0, int64(time.Since(opened)))
					return nil
				})
			}
		})
	}
	for i := range restarts {
		time.Sleep(time.Until(opened.Add(time.Duration(i+1) * every)))
		srv.restart()
	}
	for firstThrough.Load() == 0 && time.Since(opened) < 8*time.Second {
		time.Sleep(10 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	require.NotZero(t, firstThrough.Load(), "no call went through within 8 s")
	return time.Duration(firstThrough.Load())
}
