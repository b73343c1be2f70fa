package throttle_test

import (
	"errors"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/throttle"
)

var errR160 = errors.New("review160: 503")

// open-loop load: rate calls a second for d, each taking succ (success)
// or fail (failure) of fake time, failing with probability pf; returns
// the refusals after warm.
func review160Load(t *testing.T, th *throttle.Throttle, rate int, d, warm, succ, fail time.Duration, pf float64, seed uint64) (refused, sent int64) {
	var ref, snt atomic.Int64
	rng := rand.New(rand.NewPCG(seed, 7))
	var mu sync.Mutex
	var wg sync.WaitGroup
	gap := time.Second / time.Duration(rate)
	start := time.Now()
	for time.Since(start) < d {
		mu.Lock()
		failing := rng.Float64() < pf
		mu.Unlock()
		late := time.Since(start) >= warm
		wg.Go(func() {
			tk, err := th.Admit()
			if err != nil {
				if late {
					ref.Add(1)
				}
				return
			}
			snt.Add(1)
			if failing {
				time.Sleep(fail)
				th.Done(tk, errR160)
			} else {
				time.Sleep(succ)
				th.Done(tk, nil)
			}
		})
		time.Sleep(gap)
	}
	wg.Wait()
	return ref.Load(), snt.Load()
}

// "while the dependency accepts well over one attempt in K nothing is
// refused": 30% failing at random, steady load.
func TestReview160SteadyThirtyPercentRefusesNothing(t *testing.T) {
	for _, c := range []struct {
		name       string
		rate       int
		succ, fail time.Duration
	}{
		{"equal-20ms", 200, 20 * time.Millisecond, 20 * time.Millisecond},
		{"slow-successes", 200, 500 * time.Millisecond, time.Millisecond},
		{"slow-failures", 200, 10 * time.Millisecond, time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				th := throttle.New()
				r, s := review160Load(t, th, c.rate, 60*time.Second, 15*time.Second, c.succ, c.fail, 0.3, 1)
				t.Logf("refused %d sent %d", r, s)
				if r > 0 {
					t.Errorf("%d refused after warm-up (%d sent) against a dependency accepting 70%%", r, s)
				}
			})
		})
	}
}

// Extreme K and windows do not panic, and refuse nothing against a healthy
// dependency; a huge K refuses nothing ever.
func TestReview160ExtremeOptions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, th := range []*throttle.Throttle{
			throttle.New(throttle.K(math.MaxFloat64)),
			throttle.New(throttle.K(1e300), throttle.Window(time.Duration(math.MaxInt64))),
			throttle.New(throttle.Window(time.Duration(math.MaxInt64))),
			throttle.New(throttle.Window(10 * time.Millisecond)),
		} {
			for range 100 {
				tk, err := th.Admit()
				if err != nil {
					t.Fatalf("refused a healthy dependency's attempt: %v", err)
				}
				th.Done(tk, nil)
			}
		}
		for _, th := range []*throttle.Throttle{throttle.New(throttle.K(math.MaxFloat64)), throttle.New(throttle.K(1e300))} {
			for range 1000 {
				tk, err := th.Admit()
				if err != nil {
					t.Fatalf("K huge refused: p = %v", th.RejectProbability())
				}
				th.Done(tk, errR160)
			}
			if p := th.RejectProbability(); p != 0 || math.IsNaN(p) {
				t.Errorf("K huge: p = %v", p)
			}
		}
		for _, k := range []float64{math.NaN(), math.Inf(1), math.Inf(-1), 1.0999, 0, -1} {
			func() {
				defer func() {
					if recover() == nil {
						t.Errorf("K(%v) did not panic", k)
					}
				}()
				throttle.K(k)
			}()
		}
		for _, w := range []time.Duration{0, -1, time.Duration(math.MinInt64), 9 * time.Millisecond} {
			func() {
				defer func() {
					if recover() == nil {
						t.Errorf("Window(%v) did not panic", w)
					}
				}()
				throttle.Window(w)
			}()
		}
	})
}

// The caller's cancellations and the throttle's own not-sent attempts,
// however many, never feed it: after 10,000 canceled attempts and 10,000
// rejected ones, a single-failure-in-twenty dependency is refused nothing.
func TestReview160CancellationsNeverFeed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		th := throttle.New()
		for i := range 20 {
			tk, _ := th.Admit()
			if i == 0 {
				th.Done(tk, errR160)
			} else {
				th.Done(tk, nil)
			}
		}
		for range 10000 {
			tk, err := th.Admit()
			if err != nil {
				t.Fatalf("refused: p %v", th.RejectProbability())
			}
			th.Done(tk, resilience.Rejected(errors.New("not sent")))
			tk, err = th.Admit()
			if err != nil {
				t.Fatalf("refused: p %v", th.RejectProbability())
			}
			th.Done(tk, resilience.Permanent(errors.New("400")))
		}
		for range 10000 {
			tk, err := th.Admit()
			if err != nil {
				t.Fatalf("refused: p %v", th.RejectProbability())
			}
			th.Done(tk, errors.Join(errors.New("x"), contextCanceled()))
		}
		if p := th.RejectProbability(); p != 0 {
			t.Errorf("p = %v", p)
		}
	})
}
