package throttle_test

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/throttle"
)

// A dependency that fails a share f of its attempts at random (not for
// load: it accepts well over one in K), plus a 30 ms blip of total
// failure at 3 s, called by worker loops that call again at once when
// refused. The package doc: "while the dependency accepts well over one
// attempt in K nothing is refused (near one in K, the windows' swings
// refuse a few ...)". Measured: the share of attempts refused in seconds
// 8 to 20, long after the blip left the 1 s window.
func TestReview100WorkerLoopsBackgroundFailures(t *testing.T) {
	if raceEnabled {
		t.Skip("a virtual-time simulation of figures, minutes under the race detector, which finds nothing in one goroutine: .ci/run runs it without")
	}
	for _, f := range []float64{0.01, 0.1, 0.2, 0.3, 0.4} {
		for _, outage := range []time.Duration{0, 30 * time.Millisecond, 300 * time.Millisecond, 1500 * time.Millisecond} {
			blip := outage > 0
			t.Run(fmt.Sprintf("fail%.0f%%/outage=%v", f*100, outage), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					s := &r100Sim{
						th:         throttle.New(throttle.Window(time.Second)),
						workers:    6,
						refuseGap:  50 * time.Microsecond,
						statBucket: time.Second,
						dep: func(now time.Duration, _ float64) error {
							if blip && now >= 3*time.Second && now < 3*time.Second+outage {
								return r100Fail
							}
							return r100Random(f)
						},
					}
					s.run(20 * time.Second)
					sent, ref, acc := r100Sum(s.sent, 8, 20), r100Sum(s.refused, 8, 20), r100Sum(s.accepted, 8, 20)
					t.Logf("s8-20: sent %d accepted %d refused %d (%.1f%% of attempts); per second refused %v", sent, acc, ref, 100*float64(ref)/float64(ref+sent), s.refused)
					// A plain client's 6 workers at 5 ms: 1,200 calls a second, of which (1-f) accepted.
					if plain := 12 * 1200 * (1 - f); float64(acc) < 0.9*plain {
						t.Errorf("the dependency accepted %d attempts in 12 s; a plain client's: about %.0f", acc, plain)
					}
				})
			})
		}
	}
}
