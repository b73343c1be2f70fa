package throttle_test

// review169: extreme K and Window values.

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/throttle"
)

const r169Max = time.Duration(math.MaxInt64)

var r169Ks = []float64{1.1, 1.5, 2, 1e6, 1e300, math.MaxFloat64}
var r169Windows = []time.Duration{10 * time.Millisecond, time.Second, r169Max / 2, r169Max}

// TestReview169HealthyNeverRefused: whatever K and window, a healthy
// dependency (every attempt accepted) is never refused, with time
// passing between bursts.
func TestReview169HealthyNeverRefused(t *testing.T) {
	for _, k := range r169Ks {
		for _, w := range r169Windows {
			t.Run(fmt.Sprintf("K=%g/W=%d", k, w), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					th := throttle.New(throttle.K(k), throttle.Window(w))
					for round := range 50 {
						for range 100 {
							tk, err := th.Admit()
							if err != nil {
								t.Fatalf("round %d: a healthy dependency's attempt refused: %v", round, err)
							}
							th.Done(tk, nil)
						}
						time.Sleep(time.Millisecond * time.Duration(round%7))
					}
				})
			})
		}
	}
}

// TestReview169ProbabilityFinite: a dependency that fails everything,
// then recovers: the reject probability is always a number in [0, 1]
// (no NaN); and after recovery, a window (plus a few buckets) later, it
// returns to 0 for windows that fit the test's fake clock.
func TestReview169ProbabilityFinite(t *testing.T) {
	boom := errors.New("overloaded")
	for _, k := range r169Ks {
		for _, w := range r169Windows {
			t.Run(fmt.Sprintf("K=%g/W=%d", k, w), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					th := throttle.New(throttle.K(k), throttle.Window(w))
					check := func(when string) float64 {
						p := th.RejectProbability()
						if math.IsNaN(p) || p < 0 || p > 1 {
							t.Fatalf("%s: reject probability %v", when, p)
						}
						return p
					}
					for range 2000 {
						tk, err := th.Admit()
						check("failing")
						if err == nil {
							th.Done(tk, boom)
						}
					}
					p := check("after failures")
					if k <= 2 && w < r169Max/2 && p == 0 {
						t.Fatalf("K %g: nothing refused after 2000 failures", k)
					}
					if w > time.Hour {
						return // the window does not pass in the test
					}
					// Back: the dependency accepts every attempt let through.
					deadline := time.Now().Add(3*w + 10*time.Second)
					for time.Now().Before(deadline) {
						tk, err := th.Admit()
						check("recovering")
						if err == nil {
							th.Done(tk, nil)
						}
						time.Sleep(max(w/100, time.Millisecond))
					}
					if p := check("recovered"); p != 0 {
						t.Fatalf("reject probability %v long after the dependency came back", p)
					}
				})
			})
		}
	}
}
