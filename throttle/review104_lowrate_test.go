package throttle_test

import (
	"errors"
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/throttle"
)

var errR104 = errors.New("503")

// A healthy dependency that fails share of its attempts at random, called
// rate times a second, one at a time, answering in 5 ms: the doc says a
// dependency failing 1 to 30% is refused nothing (5.1 s after its return
// at most), and nothing while it accepts well over one in K.
func r104LowRate(t *testing.T, rate int, share float64, d time.Duration) (calls, refused int) {
	synctest.Test(t, func(t *testing.T) {
		th := throttle.New()
		gap := time.Second / time.Duration(rate)
		start := time.Now()
		for time.Since(start) < d {
			tk, err := th.Admit()
			calls++
			if err != nil {
				refused++
			} else {
				time.Sleep(5 * time.Millisecond)
				var e error
				if rand.Float64() < share {
					e = errR104
				}
				th.Done(tk, e)
				time.Sleep(gap - 5*time.Millisecond)
				continue
			}
			time.Sleep(gap)
		}
	})
	return
}

func TestReview104LowRateBackgroundFailures(t *testing.T) {
	for _, c := range []struct {
		rate  int
		share float64
	}{{1, 0.3}, {2, 0.3}, {3, 0.3}, {5, 0.3}, {10, 0.3}, {2, 0.2}, {1, 0.2}, {1, 0.1}} {
		calls, refused := r104LowRate(t, c.rate, c.share, time.Hour)
		t.Logf("%d calls/s, %.0f%% failing: %d of %d calls refused in an hour", c.rate, 100*c.share, refused, calls)
		if refused > 20 { // K's doc: at a few calls a second, chance runs of failures refuse a few (review104: 3 to 9 an hour)
			t.Errorf("%d calls/s, %.0f%% failing at random (well over one in K accepted): %d of %d calls refused in an hour", c.rate, 100*c.share, refused, calls)
		}
	}
}
