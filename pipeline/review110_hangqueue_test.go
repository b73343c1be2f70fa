package pipeline_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// A dependency that serves 50 ms answers under a load just above what the
// limit lets through (a standing queue, as in any overload) and then
// hangs: the breaker must open. Limits of 8 and 16, over the default
// 5 consecutive failures.
func TestReview110HangAfterStandingQueue(t *testing.T) {
	for _, n := range []int{8, 16} {
		for _, oot := range []bool{false, true} {
			synctest.Test(t, func(t *testing.T) {
				opts := []limit.Option{limit.MaxWaiting(10000)}
				if oot {
					opts = append(opts, limit.OldestOnTime())
				}
				l := limit.NewFixed(n, opts...)
				b := breaker.New("hq")
				p := pipeline.New(pipeline.WithBreaker(b), pipeline.WithLimit(l))
				var hung atomic.Bool
				op := func(ctx context.Context) (int, error) {
					if !hung.Load() {
						select {
						case <-time.After(50 * time.Millisecond):
							return 1, nil
						case <-ctx.Done():
							return 0, ctx.Err()
						}
					}
					<-ctx.Done()
					return 0, ctx.Err()
				}
				every := 50 * time.Millisecond / time.Duration(n) * 4 / 5 // 1.25x capacity
				var wg sync.WaitGroup
				start := time.Now()
				opened, openedHealthy := false, false
				for time.Since(start) < 70*time.Second && !opened {
					if !hung.Load() && time.Since(start) > 10*time.Second {
						hung.Store(true)
					}
					wg.Add(1)
					go func() {
						defer wg.Done()
						ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
						defer cancel()
						_, _ = pipeline.Do(ctx, p, op)
					}()
					time.Sleep(every)
					if b.State() != resilience.StateClosed {
						opened = true
						openedHealthy = !hung.Load()
					}
				}
				hung.Store(true)
				wg.Wait()
				if openedHealthy {
					t.Errorf("n=%d oot=%v: opened while the dependency answered in 50 ms", n, oot)
				} else if !opened {
					t.Errorf("n=%d oot=%v: the breaker never opened in 60 s of a dependency that hangs (counts %+v)", n, oot, b.Counts())
				}
			})
		}
	}
}
