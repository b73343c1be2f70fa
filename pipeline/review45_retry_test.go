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
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"go.uber.org/goleak"
)

// A caller that cancels mid-backoff in a pipeline: the call returns at
// once, context.Canceled, no goroutine left.
func TestReview45PipelineCancelMidBackoff(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	for _, opts := range [][]Option{
		{WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(0), retrypolicy.BaseDelay(10*time.Second), retrypolicy.Jitter(retrypolicy.Equal)))},
		{WithTimeBudget(time.Hour), WithBreaker(breaker.New("b45")), WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(0), retrypolicy.BaseDelay(10*time.Second), retrypolicy.Jitter(retrypolicy.Equal))), WithAttemptTimeout(time.Minute)},
		{WithTimeBudget(time.Hour), WithBreaker(breaker.New("b45w", breaker.ConsecutiveFailures(1000))), WaitWhenOpen(), WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(0), retrypolicy.BaseDelay(10*time.Second), retrypolicy.Jitter(retrypolicy.Equal)))},
	} {
		p := New(opts...)
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(20*time.Millisecond, cancel)
		start := time.Now()
		_, err := Do(ctx, p, func(context.Context) (int, error) { return 0, errors.New("blip") })
		if el := time.Since(start); el > 500*time.Millisecond {
			t.Errorf("returned %v after start, cancel at 20ms", el)
		}
		var re *retrypolicy.Error
		if !errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &re) || re.Attempts != 1 {
			t.Errorf("err %v", err)
		}
		cancel()
	}
}

// The budget shorter than the next delay: the call gives up at once with
// ErrOutOfTime and the last error; a Retry-After hint past the budget too.
func TestReview45PipelineBudgetLookAhead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		blip := errors.New("blip")
		for _, hint := range []time.Duration{-1, 2 * time.Second} {
			p := New(WithTimeBudget(time.Second), WithRetry(retrypolicy.New(retrypolicy.BaseDelay(5*time.Second), retrypolicy.Jitter(retrypolicy.None), retrypolicy.MaxDelay(time.Minute))))
			if hint >= 0 {
				p = New(WithTimeBudget(time.Second), WithRetry(retrypolicy.New(retrypolicy.BaseDelay(time.Millisecond), retrypolicy.MaxDelay(time.Minute))))
			}
			start := time.Now()
			n := 0
			_, err := Do(t.Context(), p, func(context.Context) (int, error) {
				n++
				if hint >= 0 {
					return 0, resilience.RetryAfter(blip, hint)
				}
				return 0, blip
			})
			var re *retrypolicy.Error
			if time.Since(start) != 0 || n != 1 || !errors.Is(err, retrypolicy.ErrOutOfTime) || !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, blip) || !errors.As(err, &re) || re.Attempts != 1 {
				t.Errorf("hint %v: %v after %v, %d attempts", hint, err, time.Since(start), n)
			}
		}
	})
}

// Do-no-harm: a success returned after the budget ran out (an op that
// ignores ctx) is the call's result, on the first attempt and on a retry.
func TestReview45PipelineSuccessAfterBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, opts := range [][]Option{
			{WithTimeBudget(100 * time.Millisecond), WithRetry(retrypolicy.New(retrypolicy.BaseDelay(time.Millisecond)))},
			{WithTimeBudget(100 * time.Millisecond), WithBreaker(breaker.New("s45")), WithRetry(retrypolicy.New(retrypolicy.BaseDelay(time.Millisecond)))},
			{WithTimeBudget(100 * time.Millisecond), WithBreaker(breaker.New("s45w")), WaitWhenOpen(), WithRetry(retrypolicy.New(retrypolicy.BaseDelay(time.Millisecond)))},
		} {
			for _, failFirst := range []bool{false, true} {
				p := New(opts...)
				n := 0
				v, err := Do(t.Context(), p, func(ctx context.Context) (int, error) {
					n++
					if failFirst && n == 1 {
						return 0, errors.New("blip")
					}
					time.Sleep(time.Second)
					return 42, nil
				})
				if v != 42 || err != nil {
					t.Errorf("failFirst %v: success past the budget lost: %v %v", failFirst, v, err)
				}
			}
		}
	})
}

// A pipeline with a quota: thousands of concurrent failing calls never
// make more retries than the quota allows at one instant.
func TestReview45PipelineQuotaConcurrent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := retrypolicy.NewQuota(0.1, 0, 10*time.Second)
		p := New(WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(5), retrypolicy.BaseDelay(0), retrypolicy.WithQuota(q))))
		var ops atomic.Int64
		var quotaStops atomic.Int64
		var wg sync.WaitGroup
		const calls = 3000
		for range calls {
			wg.Go(func() {
				_, err := Do(t.Context(), p, func(context.Context) (int, error) { ops.Add(1); return 0, errors.New("blip") })
				if errors.Is(err, retrypolicy.ErrQuotaExhausted) {
					quotaStops.Add(1)
				}
			})
		}
		wg.Wait()
		retries := ops.Load() - calls
		// 3000 calls in one bucket: 300 a window, 30 in this tenth.
		if retries > 30 {
			t.Errorf("%d retries from %d calls at one instant; the quota allows 30 (a tenth of 300)", retries, calls)
		}
		t.Logf("retries %d, quota stops %d", retries, quotaStops.Load())
	})
}

// WaitWhenOpen + Resume: MaxAttempts holds over the whole call, waits
// included, with a flapping breaker and many goroutines.
func TestReview45PipelineResumeKeepsMaxAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("r45", breaker.ConsecutiveFailures(3), breaker.OpenTimeout(20*time.Millisecond))
		p := New(WithTimeBudget(5*time.Second), WithBreaker(b), WaitWhenOpen(),
			WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(4), retrypolicy.BaseDelay(5*time.Millisecond))))
		var down atomic.Bool
		down.Store(true)
		flipped := make(chan struct{})
		go func() {
			defer close(flipped)
			for range 50 {
				time.Sleep(37 * time.Millisecond)
				down.Store(!down.Load())
			}
			down.Store(false)
		}()
		var over atomic.Int64
		var okN, failN atomic.Int64
		var wg sync.WaitGroup
		for i := range 300 {
			wg.Go(func() {
				time.Sleep(time.Duration(i) * time.Millisecond)
				n := 0
				_, err := Do(t.Context(), p, func(ctx context.Context) (int, error) {
					n++
					time.Sleep(time.Millisecond)
					if down.Load() {
						return 0, errors.New("down")
					}
					return 1, nil
				})
				if n > 4 {
					over.Add(1)
					t.Errorf("call %d made %d attempts, MaxAttempts 4 (err %v)", i, n, err)
				}
				var re *retrypolicy.Error
				if err != nil {
					failN.Add(1)
					if errors.As(err, &re) && re.Attempts != n && !breaker.IsRejection(err) {
						t.Errorf("call %d: Attempts %d, op ran %d: %v", i, re.Attempts, n, err)
					}
				} else {
					okN.Add(1)
				}
			})
		}
		wg.Wait()
		<-flipped
		t.Logf("ok %d, failed %d", okN.Load(), failN.Load())
	})
}
