package throttle_test

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
	"github.com/resiliencekit/resiliencekit/throttle"
)

// Many goroutines admit and report attempts of every class against one
// throttle with a 10 ms window (buckets of 1 ms go by while they run),
// while others read the probability: it stays in [0, 1], never NaN, and
// nothing panics. After all is over and the window has gone by, nothing
// is refused.
func TestReview100ConcurrentProbabilityBounds(t *testing.T) {
	th := throttle.New(throttle.Window(10*time.Millisecond), throttle.K(1.1))
	var bad atomic.Int64
	var worst atomic.Uint64
	stop := time.Now().Add(1500 * time.Millisecond)
	var wg sync.WaitGroup
	errs := []error{nil, errors.New("503"), context.Canceled, resilience.Rejected(errors.New("x")), resilience.Permanent(errors.New("400")), context.DeadlineExceeded}
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 7))
			for time.Now().Before(stop) {
				tk, err := th.Admit()
				if err != nil {
					continue
				}
				if r.IntN(4) == 0 {
					time.Sleep(time.Duration(r.IntN(3000)) * time.Microsecond)
				}
				// phases: mostly failing for 100 ms, then mostly well
				var e error
				if time.Now().UnixMilli()/100%2 == 0 {
					e = errs[1+r.IntN(2)]
				} else {
					e = errs[r.IntN(len(errs))]
				}
				th.Done(tk, e)
			}
		}()
	}
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				p := th.RejectProbability()
				if math.IsNaN(p) || p < 0 || p > 1 {
					bad.Add(1)
					worst.Store(math.Float64bits(p))
				}
			}
		}()
	}
	wg.Wait()
	if n := bad.Load(); n > 0 {
		t.Fatalf("%d readings of the probability out of [0,1] (e.g. %v)", n, math.Float64frombits(worst.Load()))
	}
	time.Sleep(50 * time.Millisecond)
	for range 100 {
		tk, err := th.Admit()
		if err != nil {
			t.Fatalf("refused with nothing in the window: p=%v", th.RejectProbability())
		}
		th.Done(tk, nil)
	}
}
