package pipeline_test

import (
	"context"
	"github.com/stretchr/testify/assert"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/pipeline"
)

// The hedge package's figures: at the default 95th percentile, about one
// attempt in fifteen to twenty gets a twin (6.5% here), at the 90th one
// in ten, and the tail is cut to about the delay plus a typical latency.
// Log-normal latencies, median 10 ms, p99 100 ms, no queueing.
func TestReview42HedgeFigures(t *testing.T) {
	for _, q := range []float64{0.9, 0.95} {
		synctest.Test(t, func(t *testing.T) {
			sigma := math.Log(10) / 2.3263
			rng := rand.New(rand.NewPCG(1, 2))
			var rmu sync.Mutex
			draw := func() time.Duration {
				rmu.Lock()
				defer rmu.Unlock()
				return time.Duration(10e6 * math.Exp(sigma*rng.NormFloat64()))
			}
			var c review42Count
			p := pipeline.New(pipeline.WithListener(&c), pipeline.WithHedging(hedge.New(hedge.Quantile(q))))
			const calls = 4000
			var mu sync.Mutex
			var took, plain []time.Duration
			var wg sync.WaitGroup
			for i := range calls {
				wg.Add(1)
				go func() {
					defer wg.Done()
					start := time.Now()
					_, _ = pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
						select {
						case <-time.After(draw()):
							return 1, nil
						case <-ctx.Done():
							return 0, ctx.Err()
						}
					})
					mu.Lock()
					if i >= 500 { // after the quantile is learnt
						took = append(took, time.Since(start))
					}
					plain = append(plain, draw())
					mu.Unlock()
				}()
				time.Sleep(2500 * time.Microsecond)
			}
			wg.Wait()
			slices.Sort(took)
			slices.Sort(plain)
			pct := func(s []time.Duration, f float64) time.Duration { return s[int(f*float64(len(s)-1))] }
			share := float64(c.hedged.Load()) / calls
			assert.InDelta(t, 1.3*(1-q), share, 0.4*(1-q), "share of calls hedged")
			assert.Less(t, pct(took, .99), pct(plain, .99)*7/10, "the p99 cut")
			t.Logf("q=%v: hedges %d of %d calls (%.1f%%); plain p50 %v p95 %v p99 %v; hedged p50 %v p99 %v p99.9 %v",
				q, c.hedged.Load(), calls, 100*float64(c.hedged.Load())/calls,
				pct(plain, .5).Round(time.Millisecond), pct(plain, .95).Round(time.Millisecond), pct(plain, .99).Round(time.Millisecond),
				pct(took, .5).Round(time.Millisecond), pct(took, .99).Round(time.Millisecond), pct(took, .999).Round(time.Millisecond))
		})
	}
}
