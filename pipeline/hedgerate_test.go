package pipeline_test

import (
	"context"
	"math"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// TestHedgeRateMatchesTheQuantile: hedging after the 95th percentile of
// latencies sends a hedge for about one call in twenty, whatever the
// shape of the latencies: the delay is learnt from every attempt, the
// losers' (cut short, a lower bound of their latency) included, not only
// from the winners, which would leave out the slow tail and hedge more.
func TestHedgeRateMatchesTheQuantile(t *testing.T) {
	distributions := []struct {
		name   string
		sample func(r *rand.Rand) time.Duration
	}{
		{"exponential, mean 10ms", func(r *rand.Rand) time.Duration {
			return time.Duration(r.ExpFloat64() * float64(10*time.Millisecond))
		}},
		{"log-normal, median 10ms", func(r *rand.Rand) time.Duration {
			return time.Duration(math.Exp(r.NormFloat64()*0.8) * float64(10*time.Millisecond))
		}},
	}
	for _, d := range distributions {
		t.Run(d.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const calls = 4000
				var hedges atomic.Int64
				p := pipeline.New(pipeline.WithHedging(hedge.New(hedge.Quantile(0.95))),
					pipeline.WithListener(resilience.ListenerFunc(func(e resilience.Event) {
						if e.Kind == resilience.EventHedged {
							hedges.Add(1)
						}
					})))
				r := rand.New(rand.NewPCG(1, 2))
				latencies := make(chan time.Duration, 8)
				go func() {
					for {
						select {
						case latencies <- d.sample(r):
						case <-t.Context().Done():
							return
						}
					}
				}()
				for range calls {
					_, _ = pipeline.Do(t.Context(), p, func(ctx context.Context) (int, error) {
						select {
						case <-time.After(<-latencies):
							return 1, nil
						case <-ctx.Done():
							return 0, ctx.Err()
						}
					})
				}
				rate := float64(hedges.Load()) / calls
				t.Logf("%d hedges for %d calls: %.1f%%", hedges.Load(), calls, 100*rate)
				assert.InDelta(t, 0.06, rate, 0.0101, "the hedge rate is 5 to 7%% of the calls")
			})
		})
	}
}
