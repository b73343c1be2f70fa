package pipeline_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/throttle"
)

// Hedging still fires at an idle limit of 4 (one hedge), and of an
// adaptive limit at its default; a hedge refused by the limit behind a
// throttle gives its throttle count back, and no first attempt is refused.
func TestReview119HedgeAtLimit(t *testing.T) {
	for _, tc := range []struct {
		name  string
		l     func() *limit.Limiter
		extra int
		want  int32 // attempts sent per call
	}{
		{"fixed4", func() *limit.Limiter { return limit.NewFixed(4) }, 3, 2},
		{"fixed3", func() *limit.Limiter { return limit.NewFixed(3) }, 3, 1},
		{"fixed8", func() *limit.Limiter { return limit.NewFixed(8) }, 5, 3},
		{"aimd", func() *limit.Limiter { return limit.NewAIMD() }, 5, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := tc.l()
				th := throttle.New()
				p := pipeline.New(pipeline.WithThrottle(th), pipeline.WithLimit(l),
					pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxExtra(tc.extra), hedge.MaxShare(1))))
				for i := 0; i < 50; i++ {
					var n atomic.Int32
					_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
						n.Add(1)
						select {
						case <-time.After(100 * time.Millisecond):
						case <-ctx.Done():
						}
						return 1, nil
					})
					if err != nil {
						t.Fatalf("call %d: %v", i, err)
					}
					synctest.Wait()
					if got := n.Load(); i == 0 && got != tc.want || got > tc.want {
						t.Fatalf("call %d: %d attempts, want %d (call 0; at most after: MaxShare budget)", i, got, tc.want)
					}
					if l.InFlight() != 0 {
						t.Fatalf("inflight %d after call", l.InFlight())
					}
				}
				if pr := th.RejectProbability(); pr != 0 {
					t.Fatalf("throttle reject probability %v after healthy calls", pr)
				}
				// a burst of 4 concurrent first attempts at limit 4 with hedges: none refused
				if tc.name == "fixed4" {
					var wg sync.WaitGroup
					var fails atomic.Int32
					for i := 0; i < 4; i++ {
						wg.Add(1)
						go func() {
							defer wg.Done()
							time.Sleep(time.Duration(i) * 20 * time.Millisecond)
							if _, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
								select {
								case <-time.After(200 * time.Millisecond):
								case <-ctx.Done():
								}
								return 1, nil
							}); err != nil {
								fails.Add(1)
							}
						}()
					}
					wg.Wait()
					if fails.Load() != 0 {
						t.Fatalf("%d of 4 calls failed at limit 4 with hedging", fails.Load())
					}
				}
			})
		})
	}
}
