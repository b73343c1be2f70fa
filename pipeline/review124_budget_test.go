package pipeline_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

type r124Hedges struct{ n atomic.Int32 }

func (h *r124Hedges) OnEvent(e resilience.Event) {
	if e.Kind == resilience.EventHedged {
		h.n.Add(1)
	}
}

// Every call slow, all at once in bursts within one window: the hedges
// sent must stay within MaxShare's bound (share*calls+1, +1 at a
// window's edge), retries or not, MaxExtra or not.
func TestR124BudgetBursts(t *testing.T) {
	for _, extra := range []int{1, 5} {
		synctest.Test(t, func(t *testing.T) {
			var h r124Hedges
			var ops atomic.Int32
			p := pipeline.New(pipeline.WithListener(&h),
				pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond))),
				pipeline.WithHedging(hedge.New(hedge.Delay(time.Millisecond), hedge.MaxShare(0.1), hedge.MaxExtra(extra))))
			const calls = 200
			var wg sync.WaitGroup
			for i := range calls {
				if i%50 == 0 {
					time.Sleep(100 * time.Millisecond)
				}
				wg.Go(func() {
					pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
						ops.Add(1)
						select {
						case <-time.After(20 * time.Millisecond):
							return 0, errBoom124
						case <-ctx.Done():
							return 0, ctx.Err()
						}
					})
				})
			}
			wg.Wait()
			max := int32(0.1*calls + 1 + 1)
			t.Logf("extra=%d: hedges %d ops %d", extra, h.n.Load(), ops.Load())
			if h.n.Load() > max {
				t.Errorf("extra=%d: %d hedges for %d calls, max %d", extra, h.n.Load(), calls, max)
			}
			if got := ops.Load() - 3*calls; got > max {
				t.Errorf("extra=%d: %d extra operations", extra, got)
			}
		})
	}
}

var errBoom124 = &r124Err{}

type r124Err struct{}

func (*r124Err) Error() string { return "503" }
