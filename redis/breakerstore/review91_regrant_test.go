package breakerstore_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/redis/breakerstore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// TestReview91ProbeEndingDuringAFlushIsGrantedAgain: a probe that ends
// while a flush that renews its grant (ProbeRunning) is on its way: the
// answer's grant is taken for a new one (no permit, no probe running,
// no permit used since the flush was formed), and a second probe runs in
// the same half-open generation, to a dependency whose first probe just
// failed. One replica, HalfOpenRequests 1, the dependency down all along,
// a link of 30 ms each way (round trip 60 ms, flush interval 100 ms),
// probes of 80 ms (ending inside a flush round trip).
func TestReview91ProbeEndingDuringAFlushIsGrantedAgain(t *testing.T) {
	srv := redistest.Start(t)
	px := redistest.NewProxy(t, srv.Addr())
	c := redisClient91(px.Addr())
	defer c.Close()
	var halfOpens, probes atomic.Int64
	var mu sync.Mutex
	perRound := map[int64]int{}
	lis := resilience.ListenerFunc(func(e resilience.Event) {
		if e.Kind == resilience.EventStateChange && e.To == resilience.StateHalfOpen && e.Name == "regrant (fleet)" {
			halfOpens.Add(1)
		}
	})
	b := breaker.New("regrant", breaker.Shared(breakerstore.New(c, "rg91:")), breaker.FailureRate(0.5, 5),
		breaker.ConsecutiveFailures(0), breaker.OpenTimeout(300*time.Millisecond), breaker.FlushInterval(100*time.Millisecond),
		breaker.WithListener(lis))
	defer b.Close()
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for !stop.Load() {
				_ = b.Execute(context.Background(), func(context.Context) error {
					if b.FleetState() != resilience.StateClosed {
						probes.Add(1)
						mu.Lock()
						perRound[halfOpens.Load()]++
						mu.Unlock()
						time.Sleep(80 * time.Millisecond)
					}
					return errors.New("down")
				})
				time.Sleep(time.Millisecond)
			}
		})
	}
	for b.FleetState() == resilience.StateClosed {
		time.Sleep(time.Millisecond)
	}
	px.Delay(30 * time.Millisecond)
	for range 10 {
		time.Sleep(500 * time.Millisecond)
		st, err := b.Fleet(context.Background())
		t.Logf("fleet %v %v; view %v; state %v", st, err, b.FleetState(), b.State())
	}
	stop.Store(true)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	extra := 0
	for r, n := range perRound {
		if n > 1 {
			extra++
			t.Logf("half-open round %d: %d probes", r, n)
		}
	}
	t.Logf("%d half-open rounds, %d probes, %d rounds with more than HalfOpenRequests (1) probes", halfOpens.Load(), probes.Load(), extra)
	if extra > 0 {
		t.Errorf("%d of %d half-open generations ran more than HalfOpenRequests probes: a running probe's renewed grant, answered after the probe ended, was taken for a new permit", extra, len(perRound))
	}
}
