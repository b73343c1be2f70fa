package throttle_test

import (
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/throttle"
)

// K's doc: after a 30 s outage at 1,000 calls a second, with the default
// window and K 2, the throttle refuses nothing about two buckets after
// the dependency is back. Here the dependency, once back, fails a share f of
// its attempts at random, as many healthy ones do (accepting well over one
// in K: nothing refused, the package doc says).
func TestReview100RecoveryWithBackgroundFailures(t *testing.T) {
	if raceEnabled {
		t.Skip("a virtual-time simulation of figures, minutes under the race detector, which finds nothing in one goroutine: .ci/run runs it without")
	}
	for _, tc := range []struct {
		f   float64
		lat time.Duration
	}{{0, 0}, {0, 50 * time.Millisecond}, {0.01, 5 * time.Millisecond}, {0.1, 5 * time.Millisecond}, {0.3, 5 * time.Millisecond}} {
		f := tc.f
		t.Run(fmt.Sprintf("fail%.0f%%/latency=%v", f*100, tc.lat), func(t *testing.T) {
			var lates []time.Duration
			var refs []int
			for range r100Runs {
				synctest.Test(t, func(t *testing.T) {
					const outEnd = 40 * time.Second
					s := &r100Sim{
						th:         throttle.New(),
						open:       time.Millisecond,
						statBucket: time.Second,
						latency:    func() time.Duration { return tc.lat },
						dep: func(now time.Duration, _ float64) error {
							if now >= 10*time.Second && now < outEnd {
								return r100Fail
							}
							return r100Random(f)
						},
					}
					s.run(80 * time.Second)
					late := s.lastRefused - outEnd
					ref := r100Sum(s.refused, 40, 80)
					lates = append(lates, late.Round(10*time.Millisecond))
					refs = append(refs, ref)
				})
			}
			bad := 0
			for _, l := range lates {
				if l > 8*time.Second {
					bad++
				}
			}
			slices.Sort(lates)
			slices.Sort(refs)
			t.Logf("last refusal after the return, %d runs: %v; calls refused after it: %v", len(lates), lates, refs)
			if bad > 0 {
				t.Errorf("%d of %d runs refused calls more than 8 s after the dependency was back (up to %v, %d calls); the package doc: within a bucket, and one more for each probe that fails", bad, len(lates), lates[len(lates)-1], refs[len(refs)-1])
			}
		})
	}
}

const r100Runs = 20
