package pipeline_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// Retry-After hints near the end of the time budget: the call ends within
// it, out of its own budget.
func TestReview127BudgetRetryAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := pipeline.New(
			pipeline.WithTimeBudget(time.Second),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(0), retrypolicy.BaseDelay(0))),
		)
		start := time.Now()
		n := 0
		_, err := pipeline.Do(t.Context(), p, func(ctx context.Context) (int, error) {
			n++
			time.Sleep(100 * time.Millisecond)
			return 0, resilience.RetryAfter(errors.New("busy"), 300*time.Millisecond)
		})
		el := time.Since(start)
		var re *retrypolicy.Error
		if el > time.Second || !errors.As(err, &re) || !errors.Is(err, retrypolicy.ErrOutOfTime) || !re.OwnBudget {
			t.Fatalf("after %v, %d attempts: %v (%+v)", el, n, err, re)
		}
		// 0: attempt to 100, wait to 400, attempt to 500, wait to 800, attempt to 900: next wait would end past.
		if n != 3 || el != 900*time.Millisecond {
			t.Fatalf("%d attempts, %v", n, el)
		}
	})
}

// A caller's deadline before the pipeline's budget: the call ends by it,
// and it is not the pipeline's own.
func TestReview127CallerDeadlineFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := pipeline.New(
			pipeline.WithTimeBudget(10*time.Second),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(0), retrypolicy.BaseDelay(0))),
		)
		ctx, cancel := context.WithTimeout(t.Context(), 250*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := pipeline.Do(ctx, p, func(ctx context.Context) (int, error) {
			select {
			case <-time.After(100 * time.Millisecond):
				return 0, errors.New("x")
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		})
		el := time.Since(start)
		var re *retrypolicy.Error
		if el > 250*time.Millisecond || !errors.As(err, &re) || !errors.Is(err, retrypolicy.ErrOutOfTime) || re.OwnBudget {
			t.Fatalf("after %v: %v (%+v)", el, err, re)
		}
	})
}

// WaitWhenOpen: a call whose budget ends before the breaker's next probe
// fails at once; one whose budget holds the probe ends within it.
func TestReview127WaitWhenOpenBudget(t *testing.T) {
	for _, tc := range []struct {
		budget  time.Duration
		openFor time.Duration
		wantNow bool
		healthy bool
	}{
		{time.Second, 5 * time.Second, true, false},
		{time.Second, 500 * time.Millisecond, false, false},
		{time.Second, 500 * time.Millisecond, false, true},
	} {
		synctest.Test(t, func(t *testing.T) {
			b := breaker.New("r127", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(tc.openFor))
			p := pipeline.New(
				pipeline.WithTimeBudget(tc.budget),
				pipeline.WithBreaker(b),
				pipeline.WaitWhenOpen(),
				pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(10*time.Millisecond))),
			)
			// Open it.
			pipeline.Do(t.Context(), p, func(ctx context.Context) (int, error) { return 0, resilience.Terminal(errors.New("down")) })
			if b.State() != resilience.StateOpen {
				t.Fatalf("state %v", b.State())
			}
			start := time.Now()
			_, err := pipeline.Do(t.Context(), p, func(ctx context.Context) (int, error) {
				if tc.healthy {
					return 1, nil
				}
				time.Sleep(50 * time.Millisecond)
				return 0, errors.New("still down")
			})
			el := time.Since(start)
			if el > tc.budget {
				t.Fatalf("%+v: call took %v", tc, el)
			}
			if tc.wantNow && (el != 0 || !errors.Is(err, breaker.ErrOpen)) {
				t.Fatalf("%+v: after %v: %v", tc, el, err)
			}
			if tc.healthy && err != nil {
				t.Fatalf("%+v: healthy dependency failed: %v", tc, err)
			}
		})
	}
}

// Hedges and retries under a budget: the call ends within it.
func TestReview127HedgeBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := pipeline.New(
			pipeline.WithTimeBudget(time.Second),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(0), retrypolicy.BaseDelay(0))),
			pipeline.WithHedging(hedge.New(hedge.Delay(50*time.Millisecond), hedge.MaxShare(1), hedge.MaxExtra(3))),
		)
		var wg sync.WaitGroup
		for range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				start := time.Now()
				_, err := pipeline.Do(t.Context(), p, func(ctx context.Context) (int, error) {
					select {
					case <-time.After(180 * time.Millisecond):
						return 0, resilience.RetryAfter(errors.New("x"), 100*time.Millisecond)
					case <-ctx.Done():
						return 0, ctx.Err()
					}
				})
				if el := time.Since(start); el > time.Second || !errors.Is(err, retrypolicy.ErrOutOfTime) {
					t.Errorf("after %v: %v", el, err)
				}
			}()
		}
		wg.Wait()
	})
}

// The tie: the breaker's next probe comes exactly at the call's deadline.
// No probe can be sent within the budget, so by WaitWhenOpen's doc the
// call fails at once; it waits its whole budget instead.
func TestReview127WaitWhenOpenProbeAtDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("r127t", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(time.Second))
		p := pipeline.New(pipeline.WithTimeBudget(time.Second), pipeline.WithBreaker(b), pipeline.WaitWhenOpen())
		pipeline.Do(t.Context(), p, func(ctx context.Context) (int, error) { return 0, resilience.Terminal(errors.New("down")) })
		start := time.Now()
		_, err := pipeline.Do(t.Context(), p, func(ctx context.Context) (int, error) { return 1, nil })
		if el := time.Since(start); el != 0 || !errors.Is(err, breaker.ErrOpen) {
			t.Fatalf("probe due at the deadline: the call waited %v for nothing: %v", el, err)
		}
	})
}
