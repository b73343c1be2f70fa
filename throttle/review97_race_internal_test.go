package throttle

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/resilience"
)

type r97panicErr struct{}

func (r97panicErr) Error() string                     { return "boom" }
func (r97panicErr) ResilienceClass() resilience.Class { panic("classify") }

// Many goroutines, every outcome (success, failure, canceled, rejected, an
// error whose classification panics), short windows: the probability stays
// in [0, 1), never NaN; out comes back to 0; no count goes negative
// (a Ring's count wrapping below zero would show as a huge sum).
func TestReview97ConcurrentCountsStaySane(t *testing.T) {
	for _, w := range []time.Duration{10 * time.Millisecond, 100 * time.Millisecond, time.Second} {
		for _, k := range []float64{1.1, 2, 1e9} {
			th := New(Window(w), K(k))
			var bad atomic.Int64
			var badP atomic.Uint64
			deadline := time.Now().Add(300 * time.Millisecond)
			var wg sync.WaitGroup
			outcomes := []error{nil, errors.New("503"), context.Canceled, resilience.Rejected(errors.New("r")), r97panicErr{}, context.DeadlineExceeded}
			for g := range 16 {
				wg.Go(func() {
					for time.Now().Before(deadline) {
						tk, err := th.Admit()
						if g%4 == 0 {
							p := th.RejectProbability()
							if !(p >= 0 && p < 1) || math.IsNaN(p) {
								bad.Add(1)
								badP.Store(math.Float64bits(p))
							}
						}
						if err != nil {
							continue
						}
						if rand.IntN(50) == 0 {
							time.Sleep(time.Duration(rand.IntN(3)) * w / 10)
						}
						th.Done(tk, outcomes[rand.IntN(len(outcomes))])
					}
				})
			}
			wg.Wait()
			if bad.Load() > 0 {
				t.Errorf("window %v K %v: %d probabilities outside [0,1), e.g. %v", w, k, bad.Load(), math.Float64frombits(badP.Load()))
			}
			if o := th.out.Load(); o != 0 {
				t.Errorf("window %v K %v: out %d after every attempt was done", w, k, o)
			}
			e := th.clock.Now(&th.requests)
			for name, r := range map[string]uint64{"requests": th.requests.Sum(e), "accept": th.accept.Sum(e), "failed": th.failed.Sum(e), "refused": th.refused.Sum(e)} {
				if r > 1<<40 {
					t.Errorf("window %v K %v: %s sum %d: a count went below zero", w, k, name, r)
				}
			}
		}
	}
}
