package throttle_test

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/throttle"
)

// The package doc and docs/overload.md: to a dependency that accepts
// nothing, at 1,000 calls a second, a trickle of 1 to 2 attempts a second.
// The recovery after an outage waits for the trickle's next attempt.
// Here the answers take latency (the doc's own test answers at once).
func TestReview100DeadTrickle(t *testing.T) {
	if raceEnabled {
		t.Skip("a virtual-time simulation of figures, minutes under the race detector, which finds nothing in one goroutine: .ci/run runs it without")
	}
	for _, lat := range []time.Duration{0, time.Millisecond, 5 * time.Millisecond, 50 * time.Millisecond, 300 * time.Millisecond, time.Second} {
		t.Run(fmt.Sprint(lat), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := &r100Sim{
					th:         throttle.New(),
					open:       time.Millisecond,
					statBucket: time.Second,
					latency:    func() time.Duration { return lat },
					dep:        func(time.Duration, float64) error { return r100Fail },
				}
				s.run(300 * time.Second)
				sent := r100Sum(s.sent, 60, 300)
				maxGap, gap := 0, 0
				for _, n := range s.sent[60:] {
					if n == 0 {
						gap++
						maxGap = max(maxGap, gap)
					} else {
						gap = 0
					}
				}
				t.Logf("latency %v: %.2f attempts a second over 240 s; longest stretch with none: %d s; per second: %v", lat, float64(sent)/240, maxGap, s.sent[60:90])
				if r := float64(sent) / 240; r < 1 || r > 2 {
					t.Errorf("a trickle of %.2f attempts a second to a dead dependency; the doc: 1 to 2", r)
				}
			})
		})
	}
}
