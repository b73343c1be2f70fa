package pipeline_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// TestReview21NoHedgeOnceTheBreakerOpened, from a review: "none is sent
// once the breaker has opened". A call's first attempt is slow; another
// call trips the shared breaker before the hedge is due; also with the
// hedge queued at a full concurrency limit when the breaker opens.
func TestReview21NoHedgeOnceTheBreakerOpened(t *testing.T) {
	for _, queued := range []bool{false, true} {
		t.Run(map[bool]string{false: "due", true: "queued"}[queued], func(t *testing.T) {
			b := breaker.New("dep", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(time.Minute))
			opts := []pipeline.Option{
				pipeline.WithBreaker(b),
				pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(2), retrypolicy.BaseDelay(time.Millisecond))),
				pipeline.WithHedging(hedge.New(hedge.Delay(20 * time.Millisecond))),
			}
			lim := limit.NewFixed(1, limit.MaxWaiting(10))
			if queued {
				opts = append(opts, pipeline.WithLimit(lim))
			}
			p := pipeline.New(opts...)
			other := pipeline.New(pipeline.WithBreaker(b))
			var sentAfterOpen atomic.Int64
			var attempts atomic.Int64
			var wg sync.WaitGroup
			wg.Go(func() {
				_, _ = pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
					attempts.Add(1)
					if b.State() == resilience.StateOpen {
						sentAfterOpen.Add(1)
					}
					select {
					case <-time.After(100 * time.Millisecond):
						return 0, errors.New("503")
					case <-ctx.Done():
						return 0, ctx.Err()
					}
				})
			})
			time.Sleep(10 * time.Millisecond)
			if !queued {
				_, err := pipeline.Do(context.Background(), other, func(ctx context.Context) (int, error) { return 0, errors.New("503") })
				require.Error(t, err)
			} else {
				time.Sleep(20 * time.Millisecond) // the hedge queues at the limit
				_, err := pipeline.Do(context.Background(), other, func(ctx context.Context) (int, error) { return 0, errors.New("503") })
				require.Error(t, err)
			}
			require.Equal(t, resilience.StateOpen, b.State())
			wg.Wait()
			assert.Zero(t, sentAfterOpen.Load(), "attempts sent once the breaker had opened")
			assert.Equal(t, int64(1), attempts.Load())
		})
	}
}
