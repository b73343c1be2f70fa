package pipeline_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
)

// TestReview20AQueuedAdaptiveLimitRecoversAfterAnOutage, from a review:
// 100 callers in a closed loop, a 30 ms time budget, a dependency down
// (503 at once) for 1 s and then healthy (10 ms, unlimited capacity),
// through an adaptive limit with a queue. The limit fell to 1 in the
// outage; then each slot went to the queue's oldest attempt, with less of
// its budget left than the dependency's 10 ms: it timed out once sent,
// the limit learned the dependency's failure, and no call succeeded in
// the 9 s after (0 of 29,564). Without a queue the limit recovers.
func TestReview20AQueuedAdaptiveLimitRecoversAfterAnOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := limit.NewAIMD(limit.MaxWaiting(1000))
		p := pipeline.New(pipeline.WithLimit(l), pipeline.WithTimeBudget(30*time.Millisecond))
		var ok, failed atomic.Int64
		begin := time.Now()
		stop := begin.Add(10 * time.Second)
		var wg sync.WaitGroup
		for range 100 {
			wg.Go(func() {
				for time.Now().Before(stop) {
					down := time.Since(begin) < time.Second
					_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
						if down {
							time.Sleep(time.Millisecond)
							return 0, errors.New("503")
						}
						select {
						case <-time.After(10 * time.Millisecond):
							return 1, nil
						case <-ctx.Done():
							return 0, ctx.Err()
						}
					})
					switch {
					case down:
					case err == nil:
						ok.Add(1)
					default:
						failed.Add(1)
					}
					if err != nil {
						time.Sleep(time.Millisecond) // the caller's next request
					}
				}
			})
		}
		wg.Wait()
		total := ok.Load() + failed.Load()
		t.Logf("after the outage: %d of %d calls ok; limit %d", ok.Load(), total, l.Limit())
		require.Greater(t, float64(ok.Load()), 0.9*float64(total))
	})
}
