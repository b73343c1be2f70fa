package pipeline_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/throttle"
)

// One Throttle serves every call to one dependency (its doc). A batch
// pipeline puts a bulkhead (limit.NewFixed) after it, and its workers take
// the next job when refused; an interactive pipeline has the throttle
// alone. The dependency is down from 2 s to 8 s, then healthy but for
// bgFail of random failures. From 14 s on (6 s after its return: the doc
// promises nothing refused 5.1 s after the return at most, with 1 to 30%
// failing), the interactive calls, 50 a second, must not be throttled.
func TestReview104BatchBulkheadHoldsSharedThrottle(t *testing.T) {
	if raceEnabled {
		t.Skip("simulation in virtual time: run in .ci/run's pass without the race detector")
	}
	for _, bgFail := range []float64{0, 0.05} {
		var inter, interThrottled, batchSent, batchThrottled, batchCalls [40]int64
		synctest.Test(t, func(t *testing.T) {
			th := throttle.New() // defaults: K 2, window 10 s
			batch := pipeline.New(pipeline.WithThrottle(th), pipeline.WithLimit(limit.NewFixed(10)))
			interactive := pipeline.New(pipeline.WithThrottle(th))
			start := time.Now()
			sec := func() int { return int(time.Since(start) / time.Second) }
			op := func(batch bool) func(ctx context.Context) (int, error) {
				return func(ctx context.Context) (int, error) {
					if batch {
						atomic.AddInt64(&batchSent[sec()], 1)
					}
					time.Sleep(10 * time.Millisecond)
					if el := time.Since(start); el >= 2*time.Second && el < 8*time.Second || rand.Float64() < bgFail {
						return 0, errR104Unavailable
					}
					return 1, nil
				}
			}
			end := 30 * time.Second
			var wg sync.WaitGroup
			for range 20 {
				wg.Go(func() {
					for time.Since(start) < end {
						_, err := pipeline.Do(context.Background(), batch, op(true))
						if s := sec(); s < 40 {
							atomic.AddInt64(&batchCalls[s], 1)
							if errors.Is(err, throttle.ErrThrottled) {
								atomic.AddInt64(&batchThrottled[s], 1)
							}
						}
						if errors.Is(err, throttle.ErrThrottled) || errors.Is(err, limit.ErrLimited) {
							time.Sleep(50 * time.Microsecond) // the next job
						}
					}
				})
			}
			wg.Go(func() {
				for time.Since(start) < end {
					wg.Go(func() {
						_, err := pipeline.Do(context.Background(), interactive, op(false))
						s := sec()
						atomic.AddInt64(&inter[s], 1)
						if errors.Is(err, throttle.ErrThrottled) {
							atomic.AddInt64(&interThrottled[s], 1)
						}
					})
					time.Sleep(20 * time.Millisecond)
				}
			})
			wg.Wait()
		})
		var late, lateN int64
		for s := range 30 {
			t.Logf("bg %.0f%% s%2d: batch calls %6d throttled %6d sent %4d; interactive %2d of %2d throttled", 100*bgFail, s, batchCalls[s], batchThrottled[s], batchSent[s], interThrottled[s], inter[s])
			if s >= 16 { // 8 s after the return: docs/overload.md's figure for workers on a limit
				late += interThrottled[s]
				lateN += inter[s]
			}
		}
		if late > 0 {
			t.Errorf("bg failures %.0f%%: %d of %d interactive calls throttled 8 s or more after the dependency came back", 100*bgFail, late, lateN)
		}
	}
}
