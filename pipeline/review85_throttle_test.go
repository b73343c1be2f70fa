package pipeline_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/throttle"
)

var r85E503 = errors.New("503")

// r85Teach makes th refuse nearly everything: 200 failures.
func r85Teach(th *throttle.Throttle, n int) {
	for range n {
		if tk, err := th.Admit(); err == nil {
			th.Done(tk, r85E503)
		}
	}
}

// Refusals: ErrThrottled, class rejected, not retried, not counted by the breaker.
func TestReview85RefusalClassAndBreaker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		th := throttle.New()
		b := breaker.New("r85", breaker.ConsecutiveFailures(1000000))
		var events atomic.Int64
		p := pipeline.New(pipeline.WithThrottle(th), pipeline.WithBreaker(b),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3))),
			pipeline.WithListener(resilience.ListenerFunc(func(e resilience.Event) {
				if e.Kind == resilience.EventThrottled {
					events.Add(1)
				}
			})))
		r85Teach(th, 500)
		before := b.Counts()
		var calls, refusedFirst, ops int
		for range 1000 {
			var n int
			_, err := pipeline.Do(context.Background(), p, func(context.Context) (int, error) { n++; ops++; return 0, resilience.Permanent(errors.New("400")) })
			calls++
			if n == 0 {
				refusedFirst++
				if !errors.Is(err, throttle.ErrThrottled) || resilience.Classify(err) != resilience.ClassRejected {
					t.Fatalf("refused call: err %v class %v", err, resilience.Classify(err))
				}
			}
		}
		after := b.Counts()
		t.Logf("refused first attempt of %d of %d calls; events %d; breaker before %+v after %+v", refusedFirst, calls, events.Load(), before, after)
		if refusedFirst == 0 {
			t.Fatal("nothing refused")
		}
		if after.TotalFailures != before.TotalFailures || int(after.TotalSuccesses-before.TotalSuccesses) != calls-refusedFirst {
			t.Errorf("breaker counted refusals: %+v -> %+v", before, after)
		}
		if int(events.Load()) != refusedFirst {
			t.Errorf("%d throttled events for %d refusals", events.Load(), refusedFirst)
		}
	})
}

// A retry refused by the throttle after a real 503: what does the call return?
func TestReview85RetryRefusedAfter503(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		th := throttle.New()
		b := breaker.New("r85b", breaker.ConsecutiveFailures(1000000))
		p := pipeline.New(pipeline.WithThrottle(th), pipeline.WithBreaker(b),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(5), retrypolicy.BaseDelay(time.Millisecond))))
		r85Teach(th, 500)
		var mixed, failuresCounted int
		for range 2000 {
			var n int
			before := b.Counts()
			_, err := pipeline.Do(context.Background(), p, func(context.Context) (int, error) { n++; return 0, r85E503 })
			after := b.Counts()
			if n > 0 && errors.Is(err, throttle.ErrThrottled) {
				mixed++
				if after.TotalFailures > before.TotalFailures {
					failuresCounted++
				}
				if mixed == 1 {
					t.Logf("sent %d then throttled: err %v (class %v), breaker %+v -> %+v", n, err, resilience.Classify(err), before, after)
				}
			}
		}
		t.Logf("%d calls sent a 503 then were throttled; breaker counted %d of them as failures", mixed, failuresCounted)
	})
}

// Caller's deadlines, with and without a time budget/attempt timeout, teach nothing.
func TestReview85CallerDeadlines(t *testing.T) {
	cases := map[string][]pipeline.Option{
		"plain":           nil,
		"budget longer":   {pipeline.WithTimeBudget(10 * time.Second)},
		"attempt longer":  {pipeline.WithAttemptTimeout(10 * time.Second)},
		"breaker+budget":  {pipeline.WithTimeBudget(10 * time.Second), pipeline.WithBreaker(breaker.New("r85c", breaker.ConsecutiveFailures(1<<30)))},
		"waitopen+budget": {pipeline.WithTimeBudget(10 * time.Second), pipeline.WaitWhenOpen(), pipeline.WithBreaker(breaker.New("r85d", breaker.ConsecutiveFailures(1<<30)))},
		"limit queue":     {pipeline.WithLimit(limit.NewFixed(4, limit.MaxWaiting(100000)))},
		"hedged":          {pipeline.WithHedging(hedge.New(hedge.Delay(10 * time.Millisecond)))},
	}
	for name, opts := range cases {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				th := throttle.New()
				p := pipeline.New(append(opts, pipeline.WithThrottle(th))...)
				// 12 real failures, so the shortcut is off, then healthy answers
				r85Warm(t, th, p)
				var refused atomic.Int64
				var wg sync.WaitGroup
				for i := range 3000 {
					wg.Go(func() {
						ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
						defer cancel()
						_, err := pipeline.Do(ctx, p, func(ctx context.Context) (int, error) {
							if i%2 == 0 { // a socket deadline: "i/o timeout" as the timer fires
								dl, _ := ctx.Deadline()
								time.Sleep(time.Until(dl))
								return 0, errors.New("i/o timeout")
							}
							<-ctx.Done()
							return 0, ctx.Err()
						})
						if errors.Is(err, throttle.ErrThrottled) {
							refused.Add(1)
						}
					})
					time.Sleep(time.Millisecond)
				}
				wg.Wait()
				if refused.Load() > 0 || th.RejectProbability() > 0 {
					t.Errorf("%s: caller deadlines: %d refused, p %.2f", name, refused.Load(), th.RejectProbability())
				}
			})
		})
	}
}

// Panics and runtime.Goexit in the operation teach nothing, and leak no requests.
func TestReview85PanicGoexit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		th := throttle.New()
		p := pipeline.New(pipeline.WithThrottle(th), pipeline.WithHedging(hedge.New(hedge.Delay(time.Millisecond), hedge.MaxShare(1))))
		r85Warm(t, th, p)
		for i := range 4000 {
			done := make(chan struct{})
			go func() {
				defer close(done)
				defer func() { recover() }()
				pipeline.Do(context.Background(), p, func(context.Context) (int, error) {
					time.Sleep(2 * time.Millisecond)
					if i%2 == 0 {
						panic("bug")
					}
					runtime.Goexit()
					return 0, nil
				})
			}()
			<-done
		}
		time.Sleep(time.Second)
		if pr := th.RejectProbability(); pr > 0 {
			t.Errorf("after panics/Goexits: p %.2f", pr)
		}
		refused := 0
		for range 100 {
			if _, err := pipeline.Do(context.Background(), p, func(context.Context) (int, error) { return 0, nil }); errors.Is(err, throttle.ErrThrottled) {
				refused++
			}
		}
		if refused > 0 {
			t.Errorf("refused %d healthy calls after panics", refused)
		}
	})
}

// Healthy dependency (30% fail at random, retried), hedging and a limit queue,
// many goroutines: nothing refused.
func TestReview85HealthyFullPipeline(t *testing.T) {
	for _, f := range []float64{0.05, 0.3} {
		synctest.Test(t, func(t *testing.T) {
			th := throttle.New()
			p := pipeline.New(pipeline.WithThrottle(th),
				pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(5*time.Millisecond))),
				pipeline.WithHedging(hedge.New(hedge.MaxShare(0.5))),
				pipeline.WithLimit(limit.NewFixed(50, limit.MaxWaiting(100000))),
				pipeline.WithAttemptTimeout(2*time.Second))
			var refused, calls, failed atomic.Int64
			var wg sync.WaitGroup
			end := time.Now().Add(8 * time.Second) // 60 s took 160 s under the race detector
			for time.Now().Before(end) {
				n := 1
				if rand.IntN(400) == 0 {
					n = 1500 // a burst
				}
				for range n {
					wg.Go(func() {
						calls.Add(1)
						_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
							d := time.Duration(5+rand.ExpFloat64()*20) * time.Millisecond
							select {
							case <-time.After(d):
							case <-ctx.Done():
								return 0, ctx.Err()
							}
							if rand.Float64() < f {
								return 0, r85E503
							}
							return 1, nil
						})
						if errors.Is(err, throttle.ErrThrottled) {
							refused.Add(1)
						} else if err != nil {
							failed.Add(1)
						}
					})
				}
				time.Sleep(2 * time.Millisecond)
			}
			wg.Wait()
			t.Logf("fail %.2f: %d calls, %d refused, %d failed", f, calls.Load(), refused.Load(), failed.Load())
			if refused.Load() > 0 {
				t.Errorf("fail %.2f: %d of %d calls refused", f, refused.Load(), calls.Load())
			}
		})
	}
}

// Recovery through the pipeline, real time, short window: after the
// outage ends, refusals stop within a few windows.
func TestReview85RecoveryRealTime(t *testing.T) {
	th := throttle.New(throttle.Window(200 * time.Millisecond))
	p := pipeline.New(pipeline.WithThrottle(th))
	var down atomic.Bool
	op := func(context.Context) (int, error) {
		if down.Load() {
			return 0, r85E503
		}
		return 0, nil
	}
	run := func(d time.Duration) (refused, total int) {
		end := time.Now().Add(d)
		for time.Now().Before(end) {
			_, err := pipeline.Do(context.Background(), p, op)
			if errors.Is(err, throttle.ErrThrottled) {
				refused++
			}
			total++
			time.Sleep(200 * time.Microsecond)
		}
		return
	}
	run(500 * time.Millisecond)
	down.Store(true)
	r, n := run(600 * time.Millisecond)
	t.Logf("outage: refused %d of %d", r, n)
	down.Store(false)
	start := time.Now()
	var at time.Duration
	for time.Since(start) < 10*time.Second {
		r, n := run(50 * time.Millisecond)
		if float64(r) < 0.01*float64(n) {
			at = time.Since(start)
			break
		}
	}
	t.Logf("refusing under 1%% %v after recovery (window 200ms; doc: 44-52 windows'... ~4.4-5.2 windows for 10s)", at)
	if at == 0 || at > 3*time.Second {
		t.Errorf("still refusing %v after recovery", at)
	}
}

// r85Warm gives th 12 failures among 36 accepts (a healthy dependency
// with some failures, so that the shortcut is off) and checks p is 0.
func r85Warm(t *testing.T, th *throttle.Throttle, p *pipeline.Pipeline) {
	for i := range 48 {
		pipeline.Do(context.Background(), p, func(context.Context) (int, error) {
			if i%4 == 3 {
				return 0, r85E503
			}
			return 0, nil
		})
	}
	if pr := th.RejectProbability(); pr != 0 {
		t.Fatalf("warm-up left p %v", pr)
	}
}
