package pipeline_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/throttle"
)

// A hung dependency (every attempt cut by a 500 ms attempt timeout) for
// 20 s behind a throttle and a small fixed limit, at 200 calls a second;
// then healthy (5 ms answers, well under the limit's capacity: 5 slots
// serve 1,000 a second). How long after the return are calls still
// refused? The throttle documents about 1 s at 1,000 a second, up to a
// few seconds at lower rates; the limit frees as soon as the hung
// attempts end (500 ms).
func TestReview160RecoveryThrottleAndLimit(t *testing.T) {
	for _, kind := range []string{"throttle", "throttle+limit", "throttle+aimd"} {
		name := kind
		withLimit := kind != "throttle"
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				th := throttle.New()
				opts := []pipeline.Option{pipeline.WithThrottle(th), pipeline.WithAttemptTimeout(review160AttemptTimeout)}
				var lim *limit.Limiter
				if withLimit {
					lim = limit.NewFixed(5)
					if kind == "throttle+aimd" {
						lim = limit.NewAIMD(limit.Backoff(0.5))
					}
					opts = append(opts, pipeline.WithLimit(lim))
				}
				p := pipeline.New(opts...)
				var down atomic.Bool
				down.Store(true)
				start := time.Now()
				back := start.Add(20 * time.Second)
				var mu sync.Mutex
				var lastRefused time.Time
				refusedAfter, limitedAfter := 0, 0
				var wg sync.WaitGroup
				for time.Since(start) < 35*time.Second {
					if !time.Now().Before(back) {
						down.Store(false)
					}
					wg.Go(func() {
						began := time.Now()
						_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
							if down.Load() {
								<-ctx.Done()
								return 0, ctx.Err()
							}
							select {
							case <-time.After(5 * time.Millisecond):
								return 1, nil
							case <-ctx.Done():
								return 0, ctx.Err()
							}
						})
						now := began
						if err != nil && !now.Before(back) {
							mu.Lock()
							if now.After(lastRefused) {
								lastRefused = now
							}
							if errors.Is(err, throttle.ErrThrottled) {
								refusedAfter++
							}
							if errors.Is(err, limit.ErrLimited) {
								limitedAfter++
							}
							mu.Unlock()
						}
					})
					time.Sleep(5 * time.Millisecond)
				}
				wg.Wait()
				tail := time.Duration(0)
				if !lastRefused.IsZero() {
					tail = lastRefused.Sub(back)
				}
				t.Logf("last failure %v after the return; throttled %d, limited %d (calls started after the return)", tail, refusedAfter, limitedAfter)
				if tail > 5*time.Second {
					t.Errorf("calls to a healthy dependency still failing %v after its return", tail)
				}
			})
		})
	}
}

var review160AttemptTimeout = 2 * time.Second
