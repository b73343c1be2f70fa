package breaker_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
)

// Five replicas, rare bursts of concurrent calls at each (more than two
// intervals apart), probes that take 30ms and succeed: at most
// HalfOpenRequests probes run at once fleet-wide, and no more than
// HalfOpenRequests succeed before the fleet closes.
func TestReview52_FleetProbesExact(t *testing.T) {
	for _, hor := range []uint32{1, 2, 3} {
		synctest.Test(t, func(t *testing.T) {
			const every = 100 * time.Millisecond
			st := &slowStore52{memStore: newMemStore(), lat: 7 * time.Millisecond}
			var bs []*breaker.Breaker
			for range 5 {
				b := breaker.New("exact", breaker.Shared(st), breaker.FlushInterval(every),
					breaker.FailureRate(0.5, 5), breaker.ConsecutiveFailures(1000),
					breaker.OpenTimeout(time.Second), breaker.HalfOpenRequests(hor))
				defer b.Close()
				bs = append(bs, b)
			}
			open52(t, bs[0])
			time.Sleep(500 * time.Millisecond)
			var running, maxRunning, total atomic.Int64
			var wg sync.WaitGroup
			closed := false
			for round := 0; round < 40 && !closed; round++ {
				time.Sleep(250 * time.Millisecond)
				if s, _ := st.state("exact"); s.String() == "closed" {
					closed = true
					break
				}
				for _, b := range bs {
					for range 8 {
						wg.Add(1)
						go func() {
							defer wg.Done()
							_ = b.Execute(context.Background(), func(context.Context) error {
								r := running.Add(1)
								for {
									m := maxRunning.Load()
									if r <= m || maxRunning.CompareAndSwap(m, r) {
										break
									}
								}
								total.Add(1)
								time.Sleep(30 * time.Millisecond)
								running.Add(-1)
								return nil
							})
						}()
					}
				}
				wg.Wait()
			}
			t.Logf("hor=%d closed=%v maxRunning=%d admitted=%d", hor, closed, maxRunning.Load(), total.Load())
			if maxRunning.Load() > int64(hor) {
				t.Errorf("hor=%d: %d probes ran at once", hor, maxRunning.Load())
			}
			if !closed {
				t.Errorf("hor=%d: never closed", hor)
			}
		})
	}
}
