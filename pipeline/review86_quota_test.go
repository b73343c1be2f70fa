package pipeline

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

var review86Err = errors.New("review86 down")

// Outage of 2 s with a breaker and a quota; then healthy. Calls that end
// with ErrQuotaExhausted after the outage ended, and calls started after
// it that fail.
func TestReview86PipelineAfterOutage(t *testing.T) {
	for _, wait := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			q := retrypolicy.NewQuota(0.1, 1, 10*time.Second)
			b := breaker.New("review86", breaker.ConsecutiveFailures(5))
			opts := []Option{WithBreaker(b), WithTimeBudget(3 * time.Second),
				WithRetry(retrypolicy.New(retrypolicy.WithQuota(q), retrypolicy.MaxAttempts(4), retrypolicy.BaseDelay(50*time.Millisecond)))}
			if wait {
				opts = append(opts, WaitWhenOpen())
			}
			p := New(opts...)
			start := time.Now()
			down := func() bool { s := time.Since(start); return s >= 5*time.Second && s < 7*time.Second }
			var quotaAfter, failAfterStart, total atomic.Int64
			var wg sync.WaitGroup
			for time.Since(start) < 20*time.Second {
				wg.Add(1)
				go func() {
					defer wg.Done()
					began := time.Since(start)
					_, err := Do(context.Background(), p, func(context.Context) (int, error) {
						if down() {
							return 0, review86Err
						}
						return 1, nil
					})
					total.Add(1)
					if err != nil && errors.Is(err, retrypolicy.ErrQuotaExhausted) && time.Since(start) >= 7*time.Second {
						quotaAfter.Add(1)
					}
					if err != nil && began >= 7*time.Second+500*time.Millisecond {
						failAfterStart.Add(1)
						t.Errorf("call started at %v failed: %v", began, err)
					}
				}()
				time.Sleep(5 * time.Millisecond)
			}
			wg.Wait()
			t.Logf("wait=%v: %d calls; %d ended with quota exhausted after the outage ended; %d started 0.5s+ after it failed", wait, total.Load(), quotaAfter.Load(), failAfterStart.Load())
		})
	}
}
