package pipeline_test

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// Many goroutines share one Policy and Pipeline (with retries and
// MaxExtra 3), all within one window of 10 s: the hedges sent never pass
// MaxShare of the calls plus one (rounded up), every call succeeds against
// a slow but healthy dependency, and the breaker, which a loser's
// cancellation must not reach, stays closed with no failure counted.
func TestReview138SharedPolicyBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("r138", breaker.ConsecutiveFailures(1))
		var hedged, callsDone atomic.Int64
		pol := hedge.New(hedge.Delay(20*time.Millisecond), hedge.MaxExtra(3), hedge.MaxShare(0.1))
		p := pipeline.New(
			pipeline.WithBreaker(b),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3))),
			pipeline.WithHedging(pol),
			pipeline.WithTimeBudget(5*time.Second),
			pipeline.WithListener(resilience.ListenerFunc(func(e resilience.Event) {
				switch e.Kind {
				case resilience.EventHedged:
					hedged.Add(1)
				case resilience.EventCallDone:
					callsDone.Add(1)
				}
			})),
		)
		var n atomic.Int64
		op := func(ctx context.Context) (int, error) {
			d := 5 * time.Millisecond
			if n.Add(1)%4 == 0 {
				d = 300 * time.Millisecond // heavy tail, healthy
			}
			select {
			case <-time.After(d):
				return 1, nil
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}
		const goroutines, each = 40, 25
		var wg sync.WaitGroup
		var failed atomic.Int64
		for range goroutines {
			wg.Go(func() {
				for range each {
					if _, err := pipeline.Do(context.Background(), p, op); err != nil {
						failed.Add(1)
						t.Errorf("call failed: %v", err)
					}
				}
			})
		}
		wg.Wait()
		synctest.Wait()
		calls := goroutines * each
		limit := int64(math.Ceil(0.1*float64(calls))) + 1
		t.Logf("calls %d, hedges %d (limit %d)", calls, hedged.Load(), limit)
		if hedged.Load() > limit {
			t.Errorf("%d hedges for %d calls in one window: more than %d", hedged.Load(), calls, limit)
		}
		if b.State() != resilience.StateClosed || b.Counts().TotalFailures != 0 {
			t.Errorf("breaker %v, counts %+v", b.State(), b.Counts())
		}
		if failed.Load() != 0 {
			t.Errorf("%d calls failed", failed.Load())
		}
		_ = errors.New
	})
}
