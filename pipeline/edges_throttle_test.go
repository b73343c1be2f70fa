package pipeline

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/throttle"
)

// A healthy dependency (every attempt succeeds, in 100 ms) and a burst of
// 50 concurrent calls on a fresh throttle, or one after a quiet window:
// since requests are counted as they are sent and accepts only as they
// end, the attempts in flight look like refusals, and the throttle
// refuses calls the dependency would have served.
func TestThrottleRefusesHealthyBurst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		th := throttle.New()
		p := New(WithThrottle(th))
		var throttled atomic.Int32
		var wg sync.WaitGroup
		for range 50 {
			wg.Go(func() {
				_, err := Do(context.Background(), p, func(ctx context.Context) (int, error) {
					time.Sleep(100 * time.Millisecond)
					return 1, nil
				})
				if errors.Is(err, throttle.ErrThrottled) {
					throttled.Add(1)
				}
			})
		}
		wg.Wait()
		if n := throttled.Load(); n > 0 {
			t.Errorf("%d of 50 calls throttled; the dependency refused nothing", n)
		}
	})
}

// Attempts queued in the concurrency limit (gates run throttle, then
// limit) were counted as requests by the throttle before they waited.
func TestThrottleCountsQueuedAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		th := throttle.New()
		p := New(WithThrottle(th), WithLimit(limit.NewFixed(1, limit.MaxWaiting(100))), WithTimeBudget(time.Minute))
		// warm up: 100 accepted attempts.
		for range 100 {
			Do(context.Background(), p, func(ctx context.Context) (int, error) { return 1, nil })
		}
		var wg sync.WaitGroup
		var throttled atomic.Int32
		for range 60 {
			wg.Go(func() {
				_, err := Do(context.Background(), p, func(ctx context.Context) (int, error) {
					time.Sleep(10 * time.Millisecond)
					return 1, nil
				})
				if errors.Is(err, throttle.ErrThrottled) {
					throttled.Add(1)
				}
			})
		}
		wg.Wait()
		if n := throttled.Load(); n > 0 {
			t.Errorf("%d of 60 queued calls throttled; the dependency refused nothing", n)
		}
	})
}
