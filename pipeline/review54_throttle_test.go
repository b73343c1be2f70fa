package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/throttle"
)

var r54Down = errors.New("503 overloaded")

// Calls whose caller's deadline is too short for an answer never teach
// the throttle, whatever else the pipeline has and however the operation
// reports the deadline.
func TestReview54CallerDeadlinesNeverTeach(t *testing.T) {
	ops := map[string]func(ctx context.Context) (int, error){
		"ctxerr": func(ctx context.Context) (int, error) { <-ctx.Done(); return 0, ctx.Err() },
		"wrapped": func(ctx context.Context) (int, error) {
			<-ctx.Done()
			return 0, fmt.Errorf("read tcp: %w", ctx.Err())
		},
		"unrelated": func(ctx context.Context) (int, error) { // ignores ctx, fails after it ended
			time.Sleep(3 * time.Millisecond)
			return 0, errors.New("i/o timeout")
		},
		"overload-after": func(ctx context.Context) (int, error) {
			<-ctx.Done()
			return 0, r54Down
		},
	}
	cfgs := map[string]func(th *throttle.Throttle) []pipeline.Option{
		"plain": func(th *throttle.Throttle) []pipeline.Option { return []pipeline.Option{pipeline.WithThrottle(th)} },
		"budget": func(th *throttle.Throttle) []pipeline.Option {
			return []pipeline.Option{pipeline.WithThrottle(th), pipeline.WithTimeBudget(10 * time.Second)}
		},
		"budget+attempt": func(th *throttle.Throttle) []pipeline.Option {
			return []pipeline.Option{pipeline.WithThrottle(th), pipeline.WithTimeBudget(10 * time.Second), pipeline.WithAttemptTimeout(5 * time.Second)}
		},
		"retry+budget": func(th *throttle.Throttle) []pipeline.Option {
			return []pipeline.Option{pipeline.WithThrottle(th), pipeline.WithTimeBudget(10 * time.Second), pipeline.WithRetry(retrypolicy.New())}
		},
		"hedge+retry": func(th *throttle.Throttle) []pipeline.Option {
			return []pipeline.Option{pipeline.WithThrottle(th), pipeline.WithRetry(retrypolicy.New()), pipeline.WithHedging(hedge.New(hedge.Delay(time.Millisecond)))}
		},
		"breaker+wait+budget": func(th *throttle.Throttle) []pipeline.Option {
			return []pipeline.Option{pipeline.WithThrottle(th), pipeline.WithTimeBudget(10 * time.Second), pipeline.WithBreaker(breaker.New("r54", breaker.ConsecutiveFailures(1_000_000))), pipeline.WaitWhenOpen()}
		},
	}
	for cn, cfg := range cfgs {
		for on, op := range ops {
			t.Run(cn+"/"+on, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					th := throttle.New()
					p := pipeline.New(cfg(th)...)
					var wg sync.WaitGroup
					for range 50 {
						for range 20 {
							wg.Add(1)
							go func() {
								defer wg.Done()
								ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
								defer cancel()
								pipeline.Do(ctx, p, op)
							}()
						}
						time.Sleep(5 * time.Millisecond)
					}
					wg.Wait()
					if pr := th.RejectProbability(); pr != 0 {
						t.Errorf("after 1000 calls with 1 ms deadlines: p = %v", pr)
					}
					refused := 0
					for range 200 {
						_, err := pipeline.Do(context.Background(), p, func(context.Context) (int, error) { return 1, nil })
						if errors.Is(err, throttle.ErrThrottled) {
							refused++
						}
					}
					if refused > 0 {
						t.Errorf("%d of 200 healthy calls throttled", refused)
					}
				})
			})
		}
	}
}

// Operations that panic or call runtime.Goexit teach the throttle nothing.
func TestReview54PanicsNeverTeach(t *testing.T) {
	th := throttle.New()
	p := pipeline.New(pipeline.WithThrottle(th), pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(1))))
	for i := range 200 {
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { recover() }()
			pipeline.Do(context.Background(), p, func(context.Context) (int, error) {
				if i%2 == 0 {
					panic("bug")
				}
				runtime.Goexit()
				return 0, nil
			})
		}()
		wg.Wait()
	}
	if pr := th.RejectProbability(); pr != 0 {
		t.Errorf("after panics: p = %v", pr)
	}
}

// Breaker + WaitWhenOpen + throttle, 1000 calls/s, a 3 s outage: calls
// refused by the throttle once the dependency is back (it is healthy), and
// for how long.
func TestReview54WaitWhenOpenThenThrottled(t *testing.T) {
	for _, wait := range []bool{true, false} {
		t.Run(fmt.Sprint("wait=", wait), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				th := throttle.New()
				opts := []pipeline.Option{
					pipeline.WithTimeBudget(10 * time.Second),
					pipeline.WithBreaker(breaker.New("r54")),
					pipeline.WithRetry(retrypolicy.New()),
					pipeline.WithThrottle(th),
				}
				if wait {
					opts = append(opts, pipeline.WaitWhenOpen())
				}
				p := pipeline.New(opts...)
				start := time.Now()
				var down atomic.Bool
				op := func(ctx context.Context) (int, error) {
					select {
					case <-time.After(20 * time.Millisecond):
					case <-ctx.Done():
						return 0, ctx.Err()
					}
					if down.Load() {
						return 0, r54Down
					}
					return 1, nil
				}
				var back atomic.Int64
				var throttledAfter, failedAfter, okAfter, lastThrottled atomic.Int64
				var wg sync.WaitGroup
				for ms := range 25_000 {
					if ms == 5000 {
						down.Store(true)
					}
					if ms == 8000 {
						down.Store(false)
						back.Store(int64(time.Since(start)))
					}
					wg.Add(1)
					go func() {
						defer wg.Done()
						sent := time.Since(start)
						_, err := pipeline.Do(context.Background(), p, op)
						if b := back.Load(); b > 0 && int64(sent) >= b {
							switch {
							case err == nil:
								okAfter.Add(1)
							case errors.Is(err, throttle.ErrThrottled):
								throttledAfter.Add(1)
								lastThrottled.Store(int64(sent) - b)
								failedAfter.Add(1)
							default:
								failedAfter.Add(1)
							}
						}
					}()
					time.Sleep(time.Millisecond)
				}
				wg.Wait()
				t.Logf("calls sent after recovery: ok %d, failed %d (throttled %d), last throttled %v after recovery",
					okAfter.Load(), failedAfter.Load(), throttledAfter.Load(), time.Duration(lastThrottled.Load()))
				if throttledAfter.Load() > 0 {
					t.Errorf("%d calls sent to a healthy dependency failed (%d throttled)", failedAfter.Load(), throttledAfter.Load())
				}
			})
		})
	}
}

// A hedge refused by the throttle never fails a call whose first attempt
// succeeds.
func TestReview54RefusedHedgeHarmless(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		th := throttle.New()
		for range 2000 { // an outage: p near 1
			if tk, err := th.Admit(); err == nil {
				th.Done(tk, r54Down)
			}
		}
		p := pipeline.New(pipeline.WithThrottle(th), pipeline.WithRetry(retrypolicy.New()), pipeline.WithHedging(hedge.New(hedge.Delay(time.Millisecond), hedge.MaxShare(1))))
		admittedFail := 0
		for range 2000 {
			var ran atomic.Bool // read by the hedge as the first attempt sleeps
			_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
				if ran.CompareAndSwap(false, true) {
					time.Sleep(50 * time.Millisecond)
				}
				return 1, nil
			})
			if err != nil && ran.Load() {
				admittedFail++
				if admittedFail < 3 {
					t.Log(err)
				}
			}
		}
		if admittedFail > 0 {
			t.Errorf("%d calls failed although an attempt was admitted and succeeded", admittedFail)
		}
	})
}

// Many goroutines, real time, a dependency failing 1 call in 5 at random
// (healthy by the throttle's measure: accepts >= 1 in K), slow answers,
// hedging and retries: nothing throttled, and no goroutine left.
func TestReview54ManyGoroutinesHealthy(t *testing.T) {
	before := runtime.NumGoroutine()
	th := throttle.New()
	p := pipeline.New(pipeline.WithThrottle(th), pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(2))),
		pipeline.WithHedging(hedge.New(hedge.Delay(2*time.Millisecond))), pipeline.WithTimeBudget(time.Second))
	var throttled, n atomic.Int64
	var wg sync.WaitGroup
	for g := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 100 {
				_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
					select {
					case <-time.After(time.Duration(i%4) * time.Millisecond):
					case <-ctx.Done():
						return 0, ctx.Err()
					}
					if (i+g)%5 == 0 {
						return 0, r54Down
					}
					return 1, nil
				})
				n.Add(1)
				if errors.Is(err, throttle.ErrThrottled) {
					throttled.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if throttled.Load() > 0 {
		t.Errorf("%d of %d calls throttled", throttled.Load(), n.Load())
	}
	time.Sleep(100 * time.Millisecond)
	if after := runtime.NumGoroutine(); after > before+2 {
		t.Errorf("goroutines: %d before, %d after", before, after)
	}
}
