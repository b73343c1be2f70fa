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

// A healthy dependency whose successes take lat and whose failures (share
// of the attempts, at random: a bad instance refusing connections, a fast
// 503) come at once. Callers at rate a second, open loop, starting cold
// (a new process, or after an idle spell longer than the window). The
// dependency accepts 95% of the work: the throttle must refuse nothing
// (package doc: "while the dependency accepts well over one attempt in K
// nothing is refused").
func r104SlowAccepts(t *testing.T, rate int, lat time.Duration, share float64, idle time.Duration) (calls, refused [2]int64) {
	synctest.Test(t, func(t *testing.T) {
		th := throttle.New()
		var wg sync.WaitGroup
		var c, r [2]atomic.Int64
		phase := func(ph int) {
			start := time.Now()
			for time.Since(start) < 10*time.Second {
				wg.Go(func() {
					tk, err := th.Admit()
					c[ph].Add(1)
					if err != nil {
						r[ph].Add(1)
						return
					}
					if rand.Float64() < share {
						time.Sleep(5 * time.Millisecond)
						th.Done(tk, errR104)
						return
					}
					time.Sleep(lat)
					th.Done(tk, nil)
				})
				time.Sleep(time.Second / time.Duration(rate))
			}
			wg.Wait()
		}
		phase(0)
		time.Sleep(idle)
		phase(1)
		for i := range 2 {
			calls[i], refused[i] = c[i].Load(), r[i].Load()
		}
	})
	return
}

func TestReview104SlowAcceptsFastFailures(t *testing.T) {
	for _, c := range []struct {
		rate  int
		lat   time.Duration
		share float64
	}{{100, 2 * time.Second, 0.05}, {100, 500 * time.Millisecond, 0.05}, {200, time.Second, 0.02}, {50, 3 * time.Second, 0.1}} {
		calls, refused := r104SlowAccepts(t, c.rate, c.lat, c.share, 30*time.Second)
		t.Logf("%d/s, successes in %v, %.0f%% failing fast: cold start %d of %d refused; after a 30 s idle spell %d of %d", c.rate, c.lat, 100*c.share, refused[0], calls[0], refused[1], calls[1])
		// The package doc's limit: until the first successes come back,
		// the fast failures are all it has heard (review104: up to 82 of
		// 1,000 and 97 of 500 refused); a throttle that held on would
		// refuse most.
		if 4*refused[0] > calls[0] || 4*refused[1] > calls[1] {
			t.Errorf("%d/s, successes in %v, %.0f%% failing fast (95%%+ accepted): %d of %d calls refused from a cold start, %d of %d after an idle spell",
				c.rate, c.lat, 100*c.share, refused[0], calls[0], refused[1], calls[1])
		}
	}
}
