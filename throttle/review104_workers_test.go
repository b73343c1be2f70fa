package throttle_test

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/throttle"
)

// Workers that take the next job at once when refused, against a
// dependency down from 5 s to 35 s, then failing bg of its attempts at
// random. Doc: a dead dependency gets about one attempt a second; once
// back, the last refusal comes about 1 s after (0.3 to 1.06 s), and with
// 1 to 30% failing, nothing is refused 5.1 s after the return at most.
func TestReview104WorkerLoopOutage(t *testing.T) {
	if raceEnabled {
		t.Skip("simulation in virtual time: run in .ci/run's pass without the race detector")
	}
	for _, bg := range []float64{0, 0.1, 0.3} {
		for _, workers := range []int{1, 10} {
			var sentDown atomic.Int64
			var lastRefusal atomic.Int64
			synctest.Test(t, func(t *testing.T) {
				th := throttle.New()
				start := time.Now()
				down := func() bool { el := time.Since(start); return el >= 5*time.Second && el < 35*time.Second }
				var wg sync.WaitGroup
				for range workers {
					wg.Go(func() {
						for time.Since(start) < 60*time.Second {
							tk, err := th.Admit()
							if err != nil {
								lastRefusal.Store(int64(time.Since(start)))
								time.Sleep(100 * time.Microsecond)
								continue
							}
							if el := time.Since(start); el >= 15*time.Second && el < 35*time.Second {
								sentDown.Add(1)
							}
							time.Sleep(10 * time.Millisecond)
							var e error
							if down() || rand.Float64() < bg {
								e = errR104
							}
							th.Done(tk, e)
						}
					})
				}
				wg.Wait()
			})
			after := time.Duration(lastRefusal.Load()) - 35*time.Second
			t.Logf("bg %.0f%%, %d workers: %d attempts sent in the outage's last 20 s; last refusal %v after the return", 100*bg, workers, sentDown.Load(), after)
			if n := sentDown.Load(); n > 40 {
				t.Errorf("bg %.0f%%, %d workers: a dead dependency got %d attempts in 20 s, doc: about one a second", 100*bg, workers, n)
			}
			lim := 2 * time.Second // workers, not the doc's open loop: 0.2 to 1.8 s seen
			if bg > 0 {
				lim = 6 * time.Second
			}
			if after > lim {
				t.Errorf("bg %.0f%%, %d workers: last refusal %v after the return, doc: within %v", 100*bg, workers, after, lim)
			}
		}
	}
}
