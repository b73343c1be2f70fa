package throttle_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/throttle"
)

// Many goroutines, a tiny window, every kind of outcome, then a quiet
// healthy spell: the throttle must end refusing nothing, and never panic.
func TestReview104ConcurrentMixedOutcomes(t *testing.T) {
	for _, k := range []float64{1.1, 2, 1e9} {
		th := throttle.New(throttle.K(k), throttle.Window(10*time.Millisecond))
		var wg sync.WaitGroup
		stop := time.Now().Add(300 * time.Millisecond)
		var refused atomic.Int64
		outcomes := []error{nil, errR104, context.Canceled, context.DeadlineExceeded, resilience.Rejected(errR104), resilience.Permanent(errR104)}
		for g := range 32 {
			wg.Go(func() {
				for i := 0; time.Now().Before(stop); i++ {
					tk, err := th.Admit()
					if err != nil {
						refused.Add(1)
						continue
					}
					if g%4 == 0 {
						_ = th.RejectProbability()
					}
					th.Done(tk, outcomes[rand.IntN(len(outcomes))])
				}
			})
		}
		wg.Wait()
		time.Sleep(30 * time.Millisecond) // 3 windows
		for range 200 {
			tk, err := th.Admit()
			if err != nil {
				t.Fatalf("K %v: refused after the load was over, healthy", k)
			}
			th.Done(tk, nil)
		}
		if p := th.RejectProbability(); p != 0 {
			t.Errorf("K %v: p %v after a healthy spell", k, p)
		}
		t.Logf("K %v: %d refused during the mixed load", k, refused.Load())
	}
}
