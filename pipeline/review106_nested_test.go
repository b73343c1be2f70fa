package pipeline_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/throttle"
)

// Nested pipelines (an outer call around an SDK whose calls go through an
// inner resilient client): the dependency fails its first attempt, and the
// inner throttle refuses the inner retry (it has seen the dependency
// failing). Before the session the inner call's error was of class
// rejected and the outer loop stopped; now its class is the sent
// attempt's, transient, and the outer loop retries a call that the
// throttle just refused to retry: each outer retry sends a new first
// attempt to the overloaded dependency.
func TestReview106NestedThrottledRetryNotRetriedOutside(t *testing.T) {
	th := throttle.New(throttle.Window(100 * time.Second))
	fast := func(n int) *retrypolicy.Policy {
		return retrypolicy.New(retrypolicy.MaxAttempts(n), retrypolicy.BaseDelay(time.Microsecond), retrypolicy.MaxDelay(time.Millisecond))
	}
	overloaded := errors.New("503")
	var sent atomic.Int64
	inner := pipeline.New(pipeline.WithRetry(fast(3)), pipeline.WithThrottle(th),
		pipeline.WithListener(resilience.ListenerFunc(func(ev resilience.Event) {
			if ev.Kind == resilience.EventAttempt && ev.Attempt == 1 && ev.Err != nil {
				review106Overload(th)
			}
		})))
	outer := pipeline.New(pipeline.WithRetry(fast(3)))
	var innerErr error
	_, err := pipeline.Do(context.Background(), outer, func(ctx context.Context) (int, error) {
		_, e := pipeline.Do(ctx, inner, func(context.Context) (int, error) {
			sent.Add(1)
			return 0, overloaded
		})
		if innerErr == nil {
			innerErr = e
		}
		return 0, e
	})
	if innerErr == nil || !errors.Is(innerErr, throttle.ErrThrottled) {
		t.Skipf("scenario not reached: %v", innerErr)
	}
	t.Logf("inner error class %v; outer error %v; attempts sent to the dependency %d", resilience.Classify(innerErr), err, sent.Load())
	if sent.Load() > 1 {
		t.Errorf("the inner throttle refused the retry, yet the outer loop retried: %d attempts reached the overloaded dependency (1 before the session)", sent.Load())
	}
}

func review106Overload(th *throttle.Throttle) {
	fail := errors.New("unavailable")
	for range 5000 {
		if tk, err := th.Admit(); err == nil {
			th.Done(tk, fail)
		}
	}
}

// The same with a throttle refusing about half the attempts (fresh for
// each call): the attempts that reach the dependency, the inner error's
// class as now against as before the session (a call whose inner retry
// the throttle refused was of class rejected: the outer loop stopped).
func TestReview106NestedThrottledRetryAmplifies(t *testing.T) {
	fast := func(n int) *retrypolicy.Policy {
		return retrypolicy.New(retrypolicy.MaxAttempts(n), retrypolicy.BaseDelay(time.Microsecond), retrypolicy.MaxDelay(time.Millisecond))
	}
	overloaded := errors.New("503")
	run := func(asBefore bool) (total int64, outerAfterRefusal int) {
		for range 2000 {
			th := throttle.New(throttle.Window(100 * time.Second))
			for range 40 {
				tk, _ := th.Admit()
				th.Done(tk, nil)
			}
			for range 100 {
				if tk, err := th.Admit(); err == nil {
					th.Done(tk, overloaded)
				}
			}
			inner := pipeline.New(pipeline.WithRetry(fast(3)), pipeline.WithThrottle(th))
			outer := pipeline.New(pipeline.WithRetry(fast(3)))
			refused := false
			_, _ = pipeline.Do(context.Background(), outer, func(ctx context.Context) (int, error) {
				if refused {
					outerAfterRefusal++
				}
				_, e := pipeline.Do(ctx, inner, func(context.Context) (int, error) {
					total++
					return 0, overloaded
				})
				if errors.Is(e, throttle.ErrThrottled) {
					refused = true
					if asBefore {
						e = resilience.Rejected(e)
					}
				}
				return 0, e
			})
		}
		return total, outerAfterRefusal
	}
	before, rb := run(true)
	now, rn := run(false)
	t.Logf("attempts at the dependency over 2,000 calls: %d with the class as before, %d now; outer attempts after an inner throttle refusal: %d, %d", before, now, rb, rn)
	if float64(now) > 1.1*float64(before) {
		t.Errorf("outer retries of calls whose inner retry the throttle refused: %d attempts reached the refusing dependency, against %d before the session (+%.0f%%)", now, before, 100*(float64(now)/float64(before)-1))
	}
}
