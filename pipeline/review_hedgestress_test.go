package pipeline

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"go.uber.org/goleak"
)

// Many calls of one pipeline with hedging, real time, tiny delays: no
// attempt runs with a live context after its call returned, no race sends
// more than 1+extra attempts, and nothing is left running.
func TestEdges28HedgeStressNoLateLiveAttempt(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	for _, d := range []time.Duration{1, time.Microsecond, 200 * time.Microsecond} {
		p := New(WithHedging(hedge.New(hedge.Delay(d), hedge.MaxExtra(3), hedge.MaxShare(1))),
			WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(2), retrypolicy.BaseDelay(time.Microsecond), retrypolicy.MaxDelay(time.Microsecond))))
		var wg sync.WaitGroup
		var bad, tooMany atomic.Int32
		for g := 0; g < 16; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 100; i++ {
					var over atomic.Bool
					var n atomic.Int32
					Do(context.Background(), p, func(ctx context.Context) (int, error) {
						n.Add(1)
						if over.Load() && ctx.Err() == nil {
							bad.Add(1)
						}
						time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond)
						if rand.IntN(3) == 0 {
							return 0, errors.New("x")
						}
						return 1, nil
					})
					over.Store(true)
					if n.Load() > 2*4 {
						tooMany.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		if bad.Load() != 0 || tooMany.Load() != 0 {
			t.Errorf("delay %v: %d attempts live after their call returned, %d calls with too many attempts", d, bad.Load(), tooMany.Load())
		}
	}
	time.Sleep(50 * time.Millisecond) // abandoned hedges drain
}
