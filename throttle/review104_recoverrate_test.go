package throttle_test

import (
	"math/rand/v2"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/throttle"
)

// K's doc: "Once back, a dependency failing 1 to 30% of its attempts at
// random is refused nothing 5.1 s after its return at most". At rates
// other than the 1,000 a second measured, after a 30 s outage.
func TestReview104RecoveryAtLowerRates(t *testing.T) {
	if raceEnabled {
		t.Skip("simulation in virtual time: run in .ci/run's pass without the race detector")
	}
	// 20 runs of each: a median of 6.1 s at 10 a second, 30% failing, in
	// CI once (the doc: 2 to 3.7 s over 200 runs); 60 hold the median
	// nearer its own.
	const runs = 60
	for _, rate := range []int{10, 20, 30, 50, 100, 300} {
		for _, bg := range []float64{0.1, 0.3} {
			var lasts []time.Duration
			for range runs {
				last := time.Duration(0)
				synctest.Test(t, func(t *testing.T) {
					th := throttle.New()
					step := time.Second / time.Duration(rate)
					for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(step) {
						if tk, err := th.Admit(); err == nil {
							th.Done(tk, errR104)
						}
					}
					back := time.Now()
					for time.Since(back) < time.Minute {
						if tk, err := th.Admit(); err == nil {
							var e error
							if rand.Float64() < bg {
								e = errR104
							}
							th.Done(tk, e)
						} else {
							last = time.Since(back)
						}
						time.Sleep(step)
					}
				})
				lasts = append(lasts, last)
			}
			slices.Sort(lasts)
			median, p90, worst := lasts[len(lasts)/2], lasts[len(lasts)*9/10], lasts[len(lasts)-1]
			t.Logf("%d/s, %.0f%% failing once back: last refusal after the return, median %v, 90%% within %v, at worst %v (%d runs)", rate, 100*bg, median, p90, worst, runs)
			// K's doc, from rounds of 200 runs of each: medians 1.2 to
			// 1.9 s at 100 and 300 calls a second, 2.2 to 4.3 s at 10 to
			// 50; the tail is long (up to 15 s at 10 a second, 30%
			// failing). A throttle that held on would refuse the whole
			// minute.
			bound := 3 * time.Second
			if rate < 100 {
				bound = 6 * time.Second
			}
			if median > bound || worst > 50*time.Second {
				t.Errorf("%d/s, %.0f%% failing once back: last refusal after the return, median %v (doc: %v at most), at worst %v", rate, 100*bg, median, bound, worst)
			}
		}
	}
}
