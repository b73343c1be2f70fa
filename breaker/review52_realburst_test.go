package breaker_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// Real time: bursts of concurrent calls after quiet spells at a half-open
// fleet; probes fail so that the fleet reopens and the cycle repeats.
func TestReview52_RealBurstRejectsAtOnce(t *testing.T) {
	const every = 50 * time.Millisecond
	st := &slowStore52{memStore: newMemStore(), lat: 10 * time.Millisecond}
	b := breaker.New("realburst", breaker.Shared(st), breaker.FlushInterval(every),
		breaker.FailureRate(0.5, 5), breaker.ConsecutiveFailures(1000),
		breaker.OpenTimeout(300*time.Millisecond), breaker.HalfOpenRequests(1))
	defer b.Close()
	open52(t, b)
	var waitedTotal, probesTotal, cycles int64
	deadline := time.Now().Add(4 * time.Second)
	for time.Now().Before(deadline) {
		// quiet until half-open and > 2 intervals
		for b.FleetState() != resilience.StateHalfOpen && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(3 * every)
		if b.FleetState() != resilience.StateHalfOpen {
			continue
		}
		cycles++
		const n = 256
		var waited, probes atomic.Int64
		var wg sync.WaitGroup
		gate := make(chan struct{})
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-gate
				t0 := time.Now()
				err := b.Execute(context.Background(), func(context.Context) error {
					probes.Add(1)
					time.Sleep(5 * time.Millisecond)
					return errDep52
				})
				if breaker.IsRejection(err) && time.Since(t0) > 5*time.Millisecond {
					waited.Add(1)
				}
			}()
		}
		close(gate)
		wg.Wait()
		waitedTotal += waited.Load()
		probesTotal += probes.Load()
		if probes.Load() > 1 {
			t.Errorf("cycle %d: %d probes", cycles, probes.Load())
		}
		// let it reopen
		time.Sleep(2 * every)
	}
	t.Logf("cycles=%d probes=%d rejected-after-waiting=%d", cycles, probesTotal, waitedTotal)
	if waitedTotal > cycles {
		t.Errorf("%d rejections waited over %d cycles: more than one waiter per burst", waitedTotal, cycles)
	}
}
