package pipeline_test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/throttle"
)

// A hedge whose operation panics or calls runtime.Goexit on its own
// goroutine, while holding a slot of the limit and a count of the
// throttle: the call returns, the slots come back, the limit learns
// nothing.
func TestReview160HedgeGoexitAndPanicGiveSlotsBack(t *testing.T) {
	for _, mode := range []string{"goexit", "panic"} {
		t.Run(mode, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				lim := limit.NewAIMD(limit.Initial(8), limit.Max(8), limit.MaxWaiting(4))
				th := throttle.New()
				p := pipeline.New(pipeline.WithLimit(lim), pipeline.WithThrottle(th),
					pipeline.WithHedging(hedge.New(hedge.Delay(time.Millisecond), hedge.MaxShare(1))))
				hedged := 0
				for range 20 {
					var n atomic.Int32
					done := make(chan any, 1)
					go func() {
						defer func() { done <- recover() }()
						pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
							if n.Add(1) == 2 { // the hedge
								if mode == "goexit" {
									runtimeGoexit()
								}
								panic("r160 hedge")
							}
							select {
							case <-time.After(5 * time.Millisecond):
							case <-ctx.Done():
							}
							return 1, nil
						})
					}()
					select {
					case <-done:
					case <-time.After(10 * time.Second):
						t.Fatal("call did not return")
					}
					time.Sleep(10 * time.Millisecond)
					synctest.Wait()
					if n.Load() >= 2 {
						hedged++
					}
				}
				if hedged == 0 {
					t.Fatal("setup: no hedge sent")
				}
				t.Logf("%d calls hedged", hedged)
				if lim.InFlight() != 0 {
					t.Errorf("%d slots held after hedges that %s", lim.InFlight(), mode)
				}
				if lim.Limit() != 8 {
					t.Errorf("limit %d", lim.Limit())
				}
			})
		})
	}
}
