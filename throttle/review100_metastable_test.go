package throttle_test

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/throttle"
)

// A metastable dependency whose failures are timeouts (answered after
// failLat), as an overloaded one's often are: healthy it accepts up to
// 1,500 a second; made bad at 5 s (a trigger) until 35 s, it accepts at
// most badCap a second (answers in 20 ms) and times out the rest; it gets
// well once its load (attempts sent over the last second) stays under
// recover for a whole second. The package doc: the throttle "sends about
// K times what the dependency accepts, whatever the demand", which it
// needs to recover (aim 3); review97 held it with failures answered in 10
// ms only.
func TestReview100MetastableWithTimeouts(t *testing.T) {
	if raceEnabled {
		t.Skip("a virtual-time simulation of figures, minutes under the race detector, which finds nothing in one goroutine: .ci/run runs it without")
	}
	for _, tc := range []struct {
		badCap, recover int
		failLat         time.Duration
		hold            time.Duration // how long the load must stay under recover
	}{
		{100, 250, 10 * time.Millisecond, time.Second},
		{100, 250, 300 * time.Millisecond, time.Second},
		{100, 250, time.Second, time.Second},
		{20, 60, time.Second, time.Second},
		{5, 20, time.Second, time.Second},
		{0, 10, time.Second, time.Second},
		{0, 50, time.Second, 10 * time.Second},
		{0, 50, 300 * time.Millisecond, 10 * time.Second},
		{5, 50, time.Second, 10 * time.Second},
	} {
		t.Run(fmt.Sprintf("bad%d/recover%d/timeout%v/hold%v", tc.badCap, tc.recover, tc.failLat, tc.hold), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				bad := false
				var acceptedIn [2]int // per 100 ms: bucket, count
				var under time.Duration = -1
				var well time.Duration = -1
				s := &r100Sim{
					th:         throttle.New(),
					open:       time.Millisecond,
					statBucket: time.Second,
					latency:    func() time.Duration { return 20 * time.Millisecond },
					failLat:    tc.failLat,
				}
				s.dep = func(now time.Duration, load float64) error {
					if now >= 5*time.Second && now < 35*time.Second {
						bad = true
					}
					if bad && now >= 35*time.Second {
						if load < float64(tc.recover) {
							if under < 0 {
								under = now
							}
							if now-under >= tc.hold {
								bad = false
								if well < 0 {
									well = now - 35*time.Second
								}
							}
						} else {
							under = -1
						}
					}
					if !bad && now > 35*time.Second && load > 1500 {
						bad = true
					}
					b := int(now / (100 * time.Millisecond))
					if acceptedIn[0] != b {
						acceptedIn = [2]int{b, 0}
					}
					lim := 150
					if bad {
						lim = tc.badCap / 10
						if tc.badCap > 0 && lim == 0 && b%(10/tc.badCap) == 0 {
							lim = 1
						}
					}
					if acceptedIn[1] < lim {
						acceptedIn[1]++
						return nil
					}
					return r100Fail
				}
				s.run(155 * time.Second)
				sent, acc := r100Sum(s.sent, 20, 35), r100Sum(s.accepted, 20, 35)
				t.Logf("during the bad state (20-35 s): sent %.0f/s, accepted %.0f/s; well again %v after the trigger ended; sent a second from 30 s: %v", float64(sent)/15, float64(acc)/15, well, s.sent[30:60])
				if well < 0 {
					t.Errorf("the dependency never got well again (120 s after the trigger ended); it needs under %d/s and got %v a second from 35 s", tc.recover, s.sent[35:50])
				}
			})
		})
	}
}
