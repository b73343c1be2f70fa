package pipeline_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// Hedges, retries, a queue, cancellations and operations that ignore
// their context for a while: never more operations running than a fixed
// limit, every slot back, no waiter stranded, and no call that a queue
// with room and time should have served refused while slots stood free.
func TestReview160HedgedLimitExact(t *testing.T) {
	for seed := range 3 {
		synctest.Test(t, func(t *testing.T) {
			const n = 6
			lim := limit.NewFixed(n, limit.MaxWaiting(1000))
			p := pipeline.New(pipeline.WithLimit(lim), pipeline.WithTimeBudget(2*time.Second),
				pipeline.WithHedging(hedge.New(hedge.Delay(3*time.Millisecond), hedge.MaxShare(1), hedge.MaxExtra(2))),
				pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond))))
			var mu sync.Mutex
			in, most := 0, 0
			var wg sync.WaitGroup
			fails := 0
			for i := range 300 {
				wg.Go(func() {
					time.Sleep(time.Duration((i*7+seed)%50) * time.Millisecond)
					ctx, cancel := context.WithCancel(context.Background())
					defer cancel()
					if i%9 == 0 {
						go func() { time.Sleep(time.Duration(i%5) * time.Millisecond); cancel() }()
					}
					_, err := pipeline.Do(ctx, p, func(ctx context.Context) (int, error) {
						mu.Lock()
						in++
						most = max(most, in)
						mu.Unlock()
						defer func() { mu.Lock(); in--; mu.Unlock() }()
						d := time.Duration(1+(i+seed)%9) * time.Millisecond
						if i%4 == 0 { // deaf to its context for a while
							time.Sleep(d)
						} else {
							select {
							case <-time.After(d):
							case <-ctx.Done():
								return 0, ctx.Err()
							}
						}
						if i%6 == 0 {
							return 0, errReview160Blip
						}
						return 1, nil
					})
					if err != nil && i%9 != 0 && i%6 != 0 {
						mu.Lock()
						fails++
						mu.Unlock()
						if errors.Is(err, limit.ErrLimited) {
							t.Logf("call %d refused by the limit: %v", i, err)
						}
					}
				})
			}
			wg.Wait()
			if most > n {
				t.Errorf("%d operations running at once through a limit of %d", most, n)
			}
			if lim.InFlight() != 0 || lim.Waiting() != 0 {
				t.Errorf("after all: %d in flight, %d waiting", lim.InFlight(), lim.Waiting())
			}
			if fails > 0 {
				t.Errorf("%d healthy calls with a 2 s budget and a queue of 1000 failed", fails)
			}
		})
	}
}
