package breakerstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/redis/breakerstore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// TestReview91AtMostHalfOpenRequestsProbes: 5 replicas x 8 goroutines,
// HalfOpenRequests(2), slow probes (250 ms, longer than 3 flushes): no
// more than 2 calls reach the dependency at once while the fleet is not
// closed, through several open/half-open rounds (probes fail in the first
// rounds).
func TestReview91AtMostHalfOpenRequestsProbes(t *testing.T) {
	srv := redistest.Start(t)
	const flush = 50 * time.Millisecond
	var bs []*breaker.Breaker
	t0 := time.Now()
	var logmu sync.Mutex
	var starts []string
	for i := range 5 {
		lis := resilience.ListenerFunc(func(e resilience.Event) {
			if e.Kind == resilience.EventStateChange {
				logmu.Lock()
				starts = append(starts, fmt.Sprintf("%v r%d event %s %v->%v", time.Since(t0).Round(time.Millisecond), i, e.Name, e.From, e.To))
				logmu.Unlock()
			}
		})
		b := breaker.New("probes91", breaker.Shared(breakerstore.New(srv.Client(), "p91:")), breaker.FailureRate(0.5, 5),
			breaker.ConsecutiveFailures(0), breaker.HalfOpenRequests(2), breaker.OpenTimeout(200*time.Millisecond), breaker.FlushInterval(flush), breaker.WithListener(lis))
		bs = append(bs, b)
		defer b.Close()
	}
	var failing atomic.Bool
	failing.Store(true)
	var inflight, maxIn, probes atomic.Int64
	var gate atomic.Bool // counting on
	var stop atomic.Bool
	var wg sync.WaitGroup
	for i, b := range bs {
		for range 8 {
			wg.Go(func() {
				for !stop.Load() {
					_ = b.Execute(context.Background(), func(context.Context) error {
						counting := gate.Load() && b.FleetState() != resilience.StateClosed
						if counting {
							probes.Add(1)
							n := inflight.Add(1)
							logmu.Lock()
							starts = append(starts, fmt.Sprintf("%v r%d %v in=%d", time.Since(t0).Round(time.Millisecond), i, b.FleetState(), n))
							logmu.Unlock()
							for m := maxIn.Load(); n > m && !maxIn.CompareAndSwap(m, n); m = maxIn.Load() {
							}
							defer func() {
								inflight.Add(-1)
								logmu.Lock()
								starts = append(starts, fmt.Sprintf("%v r%d probe ends", time.Since(t0).Round(time.Millisecond), i))
								logmu.Unlock()
							}()
							time.Sleep(250 * time.Millisecond)
						}
						if failing.Load() {
							return errors.New("down")
						}
						return nil
					})
					time.Sleep(time.Millisecond)
				}
			})
		}
	}
	// Counting starts once every replica sees the fleet open, and after
	// the calls admitted before (uncounted, they return at once) are done:
	// a call a replica admitted while it still saw the fleet closed is no
	// probe.
	for _, b := range bs {
		for b.FleetState() != resilience.StateOpen {
			time.Sleep(time.Millisecond)
		}
	}
	time.Sleep(20 * time.Millisecond)
	gate.Store(true)
	time.Sleep(1500 * time.Millisecond) // rounds of failing probes
	failing.Store(false)
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		st, err := bs[0].Fleet(context.Background())
		if err == nil && st.State == resilience.StateClosed {
			break
		}
		time.Sleep(time.Millisecond)
	}
	gate.Store(false)
	stop.Store(true)
	wg.Wait()
	t.Logf("probes while the fleet was not closed: %d, most at once %d", probes.Load(), maxIn.Load())
	if maxIn.Load() > 2 {
		logmu.Lock()
		defer logmu.Unlock()
		for _, l := range starts {
			t.Log(l)
		}
		t.Errorf("%d calls reached the dependency at once while the fleet was open or half-open, HalfOpenRequests 2", maxIn.Load())
	}
}
