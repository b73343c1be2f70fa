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
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/throttle"
)

// WaitWhenOpen beside a throttle: an outage opens the breaker and makes
// the throttle refuse nearly everything; calls whose retries the breaker
// stopped wait, each holding the failure of its last attempt sent before
// the breaker opened. The dependency comes back; the probe closes the
// breaker; the waiting calls resume, and the throttle (still full of the
// outage's failures) refuses their next attempt. Such a call's error was
// of class rejected before the session (not counted); now it is of the
// class of the attempt sent before the breaker opened, and the breaker,
// closed, counts it: a backlog of refusals of the toolkit's own reopens
// the breaker against a healthy dependency.
func TestReview106WaitWhenOpenResumedThrottled(t *testing.T) {
	reopened, staleFailures := 0, 0
	diag := map[string]int{}
	for run := 0; run < 20; run++ {
		synctest.Test(t, func(t *testing.T) {
			start := time.Now()
			var back atomic.Bool
			var backAt time.Time // set before back
			var mu sync.Mutex
			opens := 0
			var lastRefused time.Duration
			defer func() {
				if run == 0 {
					t.Logf("last error %v after the return", lastRefused)
				}
			}()
			br := breaker.New("dep", breaker.ConsecutiveFailures(20), breaker.OpenTimeout(500*time.Millisecond),
				breaker.WithListener(resilience.ListenerFunc(func(ev resilience.Event) {
					if ev.Kind == resilience.EventStateChange && run == 0 {
						t.Logf("%v: %v -> %v", time.Since(start), ev.From, ev.To)
					}
					if ev.Kind == resilience.EventStateChange && ev.To == resilience.StateOpen && back.Load() && time.Since(backAt) > 20*time.Millisecond {
						mu.Lock()
						opens++
						mu.Unlock()
					}
				})))
			th := throttle.New(throttle.Window(10 * time.Second))
			p := pipeline.New(pipeline.WithBreaker(br), pipeline.WithThrottle(th), pipeline.WaitWhenOpen(),
				pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(4), retrypolicy.BaseDelay(20*time.Millisecond), retrypolicy.MaxDelay(100*time.Millisecond))))
			var wg sync.WaitGroup
			var failedAfter atomic.Int64
			for w := 0; w < 50; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for time.Since(start) < 6*time.Second {
						ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
						_, err := pipeline.Do(ctx, p, func(context.Context) (int, error) {
							time.Sleep(5 * time.Millisecond)
							if !back.Load() {
								return 0, errors.New("503")
							}
							return 1, nil
						})
						cancel()
						if err != nil && back.Load() && run == 0 {
							mu.Lock()
							diag[resilience.Classify(err).String()+" "+err.Error()[:min(len(err.Error()), 90)]]++
							if d := time.Since(backAt); d > lastRefused {
								lastRefused = d
							}
							mu.Unlock()
						}
						if err != nil && back.Load() && time.Since(backAt) > 0 && resilience.Classify(err).Failure() && errors.Is(err, throttle.ErrThrottled) {
							failedAfter.Add(1)
						}
						time.Sleep(20 * time.Millisecond)
					}
				}()
			}
			time.Sleep(2 * time.Second)
			mu.Lock()
			backAt = time.Now()
			mu.Unlock()
			back.Store(true)
			wg.Wait()
			mu.Lock()
			reopened += opens
			mu.Unlock()
			staleFailures += int(failedAfter.Load())
		})
	}
	t.Logf("breaker opened %d times after the dependency was back (20 runs); %d calls after the return failed with a failure class though their last attempt was the throttle's refusal", reopened, staleFailures)
	for k, v := range diag {
		t.Logf("%d × %s", v, k)
	}
	if reopened > 0 {
		t.Errorf("the breaker reopened %d times against a healthy dependency", reopened)
	}
}
