package throttle

import (
	"errors"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

var errReview131Unavailable = errors.New("503") // unmarked: transient, a failure

// An outage leaves the throttle "failing of late"; traffic then stops for
// an hour (the dependency recovers meanwhile) and resumes at 100 calls a
// second with 5% of failures at random. A healthy dependency: it must be
// refused nothing, as a fresh throttle refuses nothing.
func TestReview131StickyOverloadAfterIdle(t *testing.T) {
	run := func(outage bool) int {
		var refused int
		synctest.Test(t, func(t *testing.T) {
			th := New()
			if outage {
				for range 3000 { // 10 s of 300 calls a second, all failing
					if tk, err := th.Admit(); err == nil {
						th.Done(tk, errReview131Unavailable)
					}
					time.Sleep(time.Second / 300)
				}
			}
			time.Sleep(time.Hour)
			for range 3000 { // 30 s at 100 a second, 5% failing
				tk, err := th.Admit()
				if err != nil {
					refused++
				} else if rand.Float64() < 0.05 {
					th.Done(tk, errReview131Unavailable)
				} else {
					th.Done(tk, nil)
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
		return refused
	}
	for range 5 {
		if r := run(true); r > 0 {
			t.Errorf("after an outage and an hour idle: %d of 3000 calls to a healthy dependency refused (fresh: %d)", r, run(false))
		}
	}
}

// Concurrent Admit/Done with an extreme K: the probability is always in
// [0, 1] and never NaN; with the largest K nothing is ever refused.
func TestReview131ExtremeK(t *testing.T) {
	for _, k := range []float64{1.1, math.MaxFloat64} {
		th := New(K(k), Window(10*time.Millisecond))
		var bad, refused atomic.Int64
		var wg sync.WaitGroup
		stop := time.Now().Add(300 * time.Millisecond)
		for range 8 {
			wg.Go(func() {
				for time.Now().Before(stop) {
					p := th.RejectProbability()
					if math.IsNaN(p) || p < 0 || p > 1 {
						bad.Add(1)
					}
					tk, err := th.Admit()
					if err != nil {
						refused.Add(1)
						continue
					}
					if rand.IntN(10) < 9 {
						th.Done(tk, errReview131Unavailable)
					} else {
						th.Done(tk, nil)
					}
				}
			})
		}
		wg.Wait()
		if bad.Load() > 0 {
			t.Errorf("K=%v: %d readings out of [0,1]", k, bad.Load())
		}
		if k == math.MaxFloat64 && refused.Load() > 0 {
			t.Errorf("K=MaxFloat64 refused %d", refused.Load())
		}
		if k == 1.1 && refused.Load() == 0 {
			t.Errorf("K=1.1 at 90%% failures refused nothing")
		}
	}
}
