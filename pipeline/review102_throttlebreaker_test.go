package pipeline_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/throttle"
)

// A call whose first attempt reached a dead dependency and failed, and
// whose retry the throttle then refused, ends with the throttle's
// refusal as its last error: class rejected, so the breaker excludes the
// call although the dependency failed it. docs/retries.md: "Throttling.
// Behind a breaker it adds nothing: the breaker opens first". Here the
// breaker (5 consecutive failures) is kept from opening by the throttle.
func TestReview102_ThrottleKeepsTheBreakerFromOpening(t *testing.T) {
	run := func(withThrottle bool) (calls int, sent int64, opened bool) {
		b := breaker.New("dep", breaker.OpenTimeout(time.Hour))
		opts := []pipeline.Option{
			pipeline.WithBreaker(b),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(4), retrypolicy.BaseDelay(0))),
		}
		if withThrottle {
			opts = append(opts, pipeline.WithThrottle(throttle.New()))
		}
		p := pipeline.New(opts...)
		var n atomic.Int64
		for calls = 1; calls <= 200; calls++ {
			_, err := pipeline.Do(context.Background(), p, func(context.Context) (int, error) {
				n.Add(1)
				return 0, errors.New("503")
			})
			if calls == 3 && withThrottle {
				t.Logf("call 3: class %v: %v", resilience.Classify(err), err)
			}
			if b.State() == resilience.StateOpen {
				return calls, n.Load(), true
			}
		}
		return calls - 1, n.Load(), false
	}
	c0, s0, o0 := run(false)
	t.Logf("without throttle: breaker open=%v after %d calls, %d requests", o0, c0, s0)
	c1, s1, o1 := run(true)
	t.Logf("with throttle: breaker open=%v after %d calls, %d requests", o1, c1, s1)
	if !o1 || s1 > s0 {
		t.Errorf("with a throttle behind it, the breaker opened=%v after %d calls (%d requests to a dead dependency); without, after %d calls (%d requests)", o1, c1, s1, c0, s0)
	}
}

// The load on a dead dependency over 5 s at 100 calls a second: a
// breaker alone probes every OpenTimeout (100 ms); a breaker with a
// throttle behind it never opens, and the dependency gets what the
// throttle lets through.
func TestReview102_ThrottleBehindBreakerOutageLoad(t *testing.T) {
	run := func(withThrottle bool) (sent int64, opened bool) {
		synctest.Test(t, func(t *testing.T) {
			b := breaker.New("dep")
			opts := []pipeline.Option{
				pipeline.WithBreaker(b),
				pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3))),
				pipeline.WithTimeBudget(time.Second),
			}
			if withThrottle {
				opts = append(opts, pipeline.WithThrottle(throttle.New()))
			}
			p := pipeline.New(opts...)
			var n atomic.Int64
			for i := 0; i < 500; i++ {
				go pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
					n.Add(1)
					time.Sleep(5 * time.Millisecond)
					return 0, errors.New("503")
				})
				if b.State() == resilience.StateOpen {
					opened = true
				}
				time.Sleep(10 * time.Millisecond)
			}
			time.Sleep(2 * time.Second)
			sent = n.Load()
		})
		return sent, opened
	}
	s0, o0 := run(false)
	s1, o1 := run(true)
	t.Logf("breaker alone: opened=%v, %d requests for 500 calls; breaker+throttle: opened=%v, %d requests", o0, s0, o1, s1)
	if s1 > 2*s0 {
		t.Errorf("a throttle behind the breaker multiplied the outage's load: %d requests against %d (breaker opened: %v)", s1, s0, o1)
	}
}

// After a 5 s outage, how many calls fail on a healthy dependency.
func TestReview102_ThrottleBehindBreakerRecovery(t *testing.T) {
	run := func(withThrottle bool) (failedAfter, callsAfter int64, opened bool) {
		synctest.Test(t, func(t *testing.T) {
			b := breaker.New("dep")
			opts := []pipeline.Option{
				pipeline.WithBreaker(b),
				pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3))),
				pipeline.WithTimeBudget(time.Second),
			}
			if withThrottle {
				opts = append(opts, pipeline.WithThrottle(throttle.New()))
			}
			p := pipeline.New(opts...)
			start := time.Now()
			var failed, after atomic.Int64
			for i := 0; i < 1000; i++ {
				down := time.Since(start) < 5*time.Second
				go func() {
					_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
						time.Sleep(5 * time.Millisecond)
						if time.Since(start) < 5*time.Second {
							return 0, errors.New("503")
						}
						return 1, nil
					})
					if !down {
						after.Add(1)
						if err != nil {
							failed.Add(1)
						}
					}
				}()
				if b.State() == resilience.StateOpen {
					opened = true
				}
				time.Sleep(10 * time.Millisecond)
			}
			time.Sleep(2 * time.Second)
			failedAfter, callsAfter = failed.Load(), after.Load()
		})
		return
	}
	var fs []int64
	for range 5 {
		f0, a0, o0 := run(false)
		f1, a1, o1 := run(true)
		t.Logf("breaker alone (opened %v): %d of %d calls after recovery failed; breaker+throttle (opened %v): %d of %d", o0, f0, a0, o1, f1, a1)
		fs = append(fs, f1)
	}
	slices.Sort(fs)
	// docs/retries.md: 4 to 41 of 500 in 60 runs, a median of 15; 47 to 166
	// while the throttle refused the breaker's probes.
	if median := fs[len(fs)/2]; median > 30 {
		t.Errorf("with a throttle behind the breaker, a median of %d calls of 500 failed on a healthy dependency after the outage (runs: %v)", median, fs)
	}
}

// The same with a full concurrency limit: the dependency failed attempt
// 1 (a 503); the retry finds the limit full and is refused; the call is
// excluded by the breaker, not counted as the failure it was.
func TestReview102_LimitRefusedRetryHidesTheFailureFromTheBreaker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("dep")
		p := pipeline.New(pipeline.WithBreaker(b),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(10*time.Millisecond), retrypolicy.Jitter(retrypolicy.None))),
			pipeline.WithLimit(limit.NewFixed(1)))
		go func() {
			time.Sleep(5 * time.Millisecond) // takes the slot during the first call's backoff
			_, _ = pipeline.Do(context.Background(), p, func(context.Context) (int, error) {
				time.Sleep(100 * time.Millisecond)
				return 1, nil
			})
		}()
		sent := 0
		_, err := pipeline.Do(context.Background(), p, func(context.Context) (int, error) {
			sent++
			return 0, errors.New("503")
		})
		synctest.Wait()
		time.Sleep(200 * time.Millisecond)
		c := b.Counts()
		t.Logf("sent %d; err %v (class %v); breaker %+v", sent, err, resilience.Classify(err), c)
		if sent >= 1 && c.TotalFailures == 0 {
			t.Errorf("the dependency failed the call's attempt (503), but the breaker did not count the call as a failure: %+v", c)
		}
	})
}
