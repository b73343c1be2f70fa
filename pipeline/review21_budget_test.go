package pipeline_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/throttle"
)

// TestReview21BudgetHoldsUnderEverything, from a review: "WithTimeBudget
// caps each call, all attempts and delays included, at d". 100 callers,
// unlimited attempts, hedges, a throttle and a concurrency limit of 4
// with a queue, against an operation that honours its context, takes 0 to
// 30 ms and fails half the time. Every call must end close to its budget:
// the overrun is measured against that of a plain loop (time.Sleep and a
// context with the same deadline) run alongside.
func TestReview21BudgetHoldsUnderEverything(t *testing.T) {
	const budget = 50 * time.Millisecond
	p := pipeline.New(
		pipeline.WithTimeBudget(budget),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(0), retrypolicy.BaseDelay(time.Millisecond), retrypolicy.MaxDelay(20*time.Millisecond))),
		pipeline.WithHedging(hedge.New(hedge.Delay(5*time.Millisecond), hedge.MaxExtra(2), hedge.MaxShare(1))),
		pipeline.WithThrottle(throttle.New(throttle.K(10))),
		pipeline.WithLimit(limit.NewFixed(4, limit.MaxWaiting(1000))),
	)
	op := func(ctx context.Context) (int, error) {
		d := time.Duration(rand.IntN(30_000)) * time.Microsecond
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return 0, ctx.Err()
		}
		if rand.IntN(2) == 0 {
			return 0, errors.New("503")
		}
		return 1, nil
	}
	plain := func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, budget)
		defer cancel()
		for ctx.Err() == nil {
			if _, err := op(ctx); err == nil {
				return
			}
			time.Sleep(time.Millisecond)
		}
	}
	var mu sync.Mutex
	var over, overPlain []time.Duration
	var wg sync.WaitGroup
	for range 100 {
		wg.Go(func() {
			for range 20 {
				start := time.Now()
				_, _ = pipeline.Do(context.Background(), p, op)
				took := time.Since(start)
				start = time.Now()
				plain(context.Background())
				tookPlain := time.Since(start)
				mu.Lock()
				over = append(over, took-budget)
				overPlain = append(overPlain, tookPlain-budget)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	slices.Sort(over)
	slices.Sort(overPlain)
	q := func(s []time.Duration, f float64) time.Duration { return s[int(f*float64(len(s)-1))] }
	t.Logf("overrun past the budget: pipeline p50 %v p99 %v max %v; plain loop p50 %v p99 %v max %v",
		q(over, .5), q(over, .99), over[len(over)-1], q(overPlain, .5), q(overPlain, .99), overPlain[len(overPlain)-1])
	assert.LessOrEqual(t, over[len(over)-1], overPlain[len(overPlain)-1]+20*time.Millisecond)
}
