package pipeline_test

import (
	"context"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// TestReview21HedgeDelayNearMaxInt64NeverHedges, from a review: hedge.Delay
// takes any positive duration ("It panics unless d is positive"), so
// Delay(math.MaxInt64) means "hedge after 292 years": in practice never.
// The pipeline's one timer adds the delay to a monotonic reading
// (hedgeTimers.add: e.at = now + d), which overflows for a delay this
// large; the timer is set for at - now, which wraps back to d, and fixed
// delays never set it earlier, so no hedge is sent. (Held.)
func TestReview21HedgeDelayNearMaxInt64NeverHedges(t *testing.T) {
	for _, d := range []time.Duration{math.MaxInt64, math.MaxInt64 - time.Millisecond} {
		t.Run(d.String(), func(t *testing.T) {
			var attempts, hedged atomic.Int64
			p := pipeline.New(
				pipeline.WithHedging(hedge.New(hedge.Delay(d), hedge.MaxShare(1))),
				pipeline.WithListener(resilience.ListenerFunc(func(e resilience.Event) {
					if e.Kind == resilience.EventHedged {
						hedged.Add(1)
					}
				})),
			)
			for range 5 {
				res, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
					attempts.Add(1)
					select {
					case <-time.After(100 * time.Millisecond):
						return 1, nil
					case <-ctx.Done():
						return 0, ctx.Err()
					}
				})
				require.NoError(t, err)
				require.Equal(t, 1, res)
			}
			assert.Equal(t, int64(5), attempts.Load(), "5 calls with a hedging delay of %v should send 5 attempts", d)
			assert.Zero(t, hedged.Load(), "no hedge is due within a 100 ms attempt with a delay of %v", d)
		})
	}
}
