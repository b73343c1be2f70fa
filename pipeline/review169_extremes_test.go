package pipeline_test

// review169: extreme option values, across every stage of a pipeline. The
// promise attacked: "do no harm": with any option value the docs accept, a
// call against a healthy dependency succeeds; an invalid value panics at
// construction, never misbehaves at call time.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
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

const r169Max = time.Duration(math.MaxInt64)

// r169Case builds a pipeline (fresh stages each time) from extreme values.
type r169Case struct {
	name string
	mk   func() []pipeline.Option
}

// tiny: a budget no real time fits: only at once, in a bubble.
func (c r169Case) tiny() bool {
	return strings.Contains(c.name, "1ns") && !strings.Contains(c.name, "open timeout 1ns") && !strings.HasPrefix(c.name, "hedge")
}

func r169Cases() []r169Case {
	br := func(opts ...breaker.Option) pipeline.Option {
		return pipeline.WithBreaker(breaker.New("r169", opts...))
	}
	rp := func(opts ...retrypolicy.Option) pipeline.Option { return pipeline.WithRetry(retrypolicy.New(opts...)) }
	return []r169Case{
		{"budget max", func() []pipeline.Option { return []pipeline.Option{pipeline.WithTimeBudget(r169Max)} }},
		{"budget max-1", func() []pipeline.Option { return []pipeline.Option{pipeline.WithTimeBudget(r169Max - 1)} }},
		{"attempt timeout max", func() []pipeline.Option { return []pipeline.Option{pipeline.WithAttemptTimeout(r169Max)} }},
		{"budget max + attempt timeout max", func() []pipeline.Option {
			return []pipeline.Option{pipeline.WithTimeBudget(r169Max), pipeline.WithAttemptTimeout(r169Max)}
		}},
		{"budget max + attempt 1s + breaker", func() []pipeline.Option {
			return []pipeline.Option{pipeline.WithTimeBudget(r169Max), pipeline.WithAttemptTimeout(time.Second), br()}
		}},
		{"budget max + breaker + wait open", func() []pipeline.Option {
			return []pipeline.Option{pipeline.WithTimeBudget(r169Max), br(), pipeline.WaitWhenOpen()}
		}},
		{"budget 1ns", func() []pipeline.Option { return []pipeline.Option{pipeline.WithTimeBudget(1)} }},
		{"attempt 1ns", func() []pipeline.Option { return []pipeline.Option{pipeline.WithAttemptTimeout(1)} }},
		{"budget 1ns attempt 1ns breaker retry", func() []pipeline.Option {
			return []pipeline.Option{pipeline.WithTimeBudget(1), pipeline.WithAttemptTimeout(1), br(), rp()}
		}},
		{"budget 1ns hedge 1ns limit", func() []pipeline.Option {
			return []pipeline.Option{pipeline.WithTimeBudget(1), pipeline.WithHedging(hedge.New(hedge.Delay(1))), pipeline.WithLimit(limit.NewFixed(1)), rp()}
		}},
		{"budget 0 attempt 0 (none)", func() []pipeline.Option {
			return []pipeline.Option{pipeline.WithTimeBudget(0), pipeline.WithAttemptTimeout(0)}
		}},
		{"retry extremes max", func() []pipeline.Option {
			return []pipeline.Option{rp(retrypolicy.MaxAttempts(math.MaxInt), retrypolicy.BaseDelay(r169Max), retrypolicy.MaxDelay(r169Max)), pipeline.WithTimeBudget(r169Max)}
		}},
		{"retry extremes zero", func() []pipeline.Option {
			return []pipeline.Option{rp(retrypolicy.MaxAttempts(0), retrypolicy.BaseDelay(0), retrypolicy.MaxDelay(1))}
		}},
		{"retry decorrelated max", func() []pipeline.Option {
			return []pipeline.Option{rp(retrypolicy.Jitter(retrypolicy.Decorrelated), retrypolicy.BaseDelay(r169Max), retrypolicy.MaxDelay(r169Max))}
		}},
		{"retry quota zero", func() []pipeline.Option {
			return []pipeline.Option{rp(retrypolicy.WithQuota(retrypolicy.NewQuota(0, 0, 0)))}
		}},
		{"retry quota huge", func() []pipeline.Option {
			return []pipeline.Option{rp(retrypolicy.WithQuota(retrypolicy.NewQuota(math.MaxFloat64, math.MaxFloat64, r169Max)))}
		}},
		{"retry quota tiny", func() []pipeline.Option {
			return []pipeline.Option{rp(retrypolicy.WithQuota(retrypolicy.NewQuota(1e-300, 1e-300, 10*time.Millisecond)))}
		}},
		{"breaker window max 1 bucket", func() []pipeline.Option { return []pipeline.Option{br(breaker.Window(r169Max, 1))} }},
		{"breaker window max 100 buckets", func() []pipeline.Option { return []pipeline.Option{br(breaker.Window(r169Max, breaker.MaxBuckets))} }},
		{"breaker window 100ms 100 buckets", func() []pipeline.Option {
			return []pipeline.Option{br(breaker.Window(100*time.Millisecond, breaker.MaxBuckets))}
		}},
		{"breaker window 1ms 1 bucket", func() []pipeline.Option { return []pipeline.Option{br(breaker.Window(time.Millisecond, 1))} }},
		{"breaker window 0", func() []pipeline.Option { return []pipeline.Option{br(breaker.Window(0, 1))} }},
		{"breaker open timeout 1ns, all thresholds minimal", func() []pipeline.Option {
			return []pipeline.Option{br(breaker.OpenTimeout(1), breaker.ConsecutiveFailures(1), breaker.FailureRate(1e-300, 0), breaker.HalfOpenRequests(0))}
		}},
		{"breaker open timeout max, thresholds max", func() []pipeline.Option {
			return []pipeline.Option{br(breaker.OpenTimeout(r169Max), breaker.ConsecutiveFailures(math.MaxUint32), breaker.FailureRate(1, math.MaxUint32), breaker.HalfOpenRequests(math.MaxUint32))}
		}},
		{"breaker never opens", func() []pipeline.Option { return []pipeline.Option{br(breaker.ConsecutiveFailures(0))} }},
		{"throttle K 1.1 window 10ms", func() []pipeline.Option {
			return []pipeline.Option{pipeline.WithThrottle(throttle.New(throttle.K(1.1), throttle.Window(10*time.Millisecond)))}
		}},
		{"throttle K maxfloat window max", func() []pipeline.Option {
			return []pipeline.Option{pipeline.WithThrottle(throttle.New(throttle.K(math.MaxFloat64), throttle.Window(r169Max)))}
		}},
		{"limit fixed 1", func() []pipeline.Option { return []pipeline.Option{pipeline.WithLimit(limit.NewFixed(1))} }},
		{"limit fixed maxint, waiting maxint", func() []pipeline.Option {
			return []pipeline.Option{pipeline.WithLimit(limit.NewFixed(math.MaxInt, limit.MaxWaiting(math.MaxInt)))}
		}},
		{"limit aimd all maxint", func() []pipeline.Option {
			return []pipeline.Option{pipeline.WithLimit(limit.NewAIMD(limit.Min(math.MaxInt), limit.Initial(math.MaxInt), limit.Max(math.MaxInt), limit.Backoff(math.Nextafter(1, 0))))}
		}},
		{"limit aimd all 1", func() []pipeline.Option {
			return []pipeline.Option{pipeline.WithLimit(limit.NewAIMD(limit.Min(1), limit.Initial(1), limit.Max(1), limit.Backoff(0.5), limit.OldestOnTime()))}
		}},
		{"hedge delay 1ns maxextra maxint share 1", func() []pipeline.Option {
			return []pipeline.Option{pipeline.WithHedging(hedge.New(hedge.Delay(1), hedge.MaxExtra(math.MaxInt), hedge.MaxShare(1)))}
		}},
		{"hedge delay max", func() []pipeline.Option {
			return []pipeline.Option{pipeline.WithHedging(hedge.New(hedge.Delay(r169Max)))}
		}},
		{"hedge quantile tiny share tiny", func() []pipeline.Option {
			return []pipeline.Option{pipeline.WithHedging(hedge.New(hedge.Quantile(1e-300), hedge.MaxShare(1e-300)))}
		}},
		{"hedge quantile near 1", func() []pipeline.Option {
			return []pipeline.Option{pipeline.WithHedging(hedge.New(hedge.Quantile(math.Nextafter(1, 0)), hedge.MaxExtra(math.MaxInt)))}
		}},
		{"wait open without breaker", func() []pipeline.Option { return []pipeline.Option{pipeline.WaitWhenOpen()} }},
		{"wait open without breaker, gates", func() []pipeline.Option {
			return []pipeline.Option{pipeline.WaitWhenOpen(), pipeline.WithLimit(limit.NewFixed(1)), pipeline.WithThrottle(throttle.New()), rp(retrypolicy.BaseDelay(0))}
		}},
		{"everything at max", func() []pipeline.Option {
			return []pipeline.Option{
				pipeline.WithTimeBudget(r169Max), pipeline.WithAttemptTimeout(r169Max),
				br(breaker.OpenTimeout(r169Max), breaker.Window(r169Max, breaker.MaxBuckets), breaker.HalfOpenRequests(math.MaxUint32)),
				rp(retrypolicy.MaxAttempts(math.MaxInt), retrypolicy.BaseDelay(r169Max), retrypolicy.MaxDelay(r169Max),
					retrypolicy.WithQuota(retrypolicy.NewQuota(math.MaxFloat64, math.MaxFloat64, r169Max))),
				pipeline.WithThrottle(throttle.New(throttle.K(math.MaxFloat64), throttle.Window(r169Max))),
				pipeline.WithLimit(limit.NewFixed(math.MaxInt, limit.MaxWaiting(math.MaxInt))),
				pipeline.WithHedging(hedge.New(hedge.Delay(r169Max), hedge.MaxExtra(math.MaxInt), hedge.MaxShare(1))),
				pipeline.WaitWhenOpen(),
			}
		}},
		{"everything at min", func() []pipeline.Option {
			return []pipeline.Option{
				br(breaker.OpenTimeout(1), breaker.Window(time.Millisecond, 1), breaker.ConsecutiveFailures(1), breaker.FailureRate(1e-300, 0)),
				rp(retrypolicy.MaxAttempts(1), retrypolicy.BaseDelay(0), retrypolicy.MaxDelay(1),
					retrypolicy.WithQuota(retrypolicy.NewQuota(0, 0, 10*time.Millisecond))),
				pipeline.WithThrottle(throttle.New(throttle.K(1.1), throttle.Window(10*time.Millisecond))),
				pipeline.WithLimit(limit.NewFixed(1)),
				pipeline.WithHedging(hedge.New(hedge.Delay(1), hedge.MaxExtra(1), hedge.MaxShare(1e-300))),
				pipeline.WaitWhenOpen(),
			}
		}},
	}
}

// r169Healthy runs calls against a healthy dependency through p and
// fails on any error. lat is the dependency's latency (0: at once).
func r169Healthy(t *testing.T, p *pipeline.Pipeline, calls int, lat time.Duration) {
	t.Helper()
	for i := range calls {
		got, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
			if lat > 0 {
				select {
				case <-time.After(lat):
				case <-ctx.Done():
					return 0, ctx.Err()
				}
			}
			return i + 1, nil
		})
		if err != nil || got != i+1 {
			t.Fatalf("call %d to a healthy dependency: %d, %v", i, got, err)
		}
	}
}

// TestReview169HealthySynctest: every pipeline of extreme accepted values
// serves a healthy dependency, at once and with a latency (fake clock).
func TestReview169HealthySynctest(t *testing.T) {
	for _, tc := range r169Cases() {
		for _, lat := range []time.Duration{0, 3 * time.Millisecond} {
			if tc.tiny() && lat > 0 {
				continue
			}
			t.Run(fmt.Sprintf("%s/lat=%v", tc.name, lat), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					p := pipeline.New(tc.mk()...)
					r169Healthy(t, p, 100, lat)
					if b := p.Stages().Breaker; b != nil {
						b.Close()
					}
				})
			})
		}
	}
}

// TestReview169HealthyRealTime: the same on the real clock, where hedging
// uses the pipeline's one timer (not used in a synctest bubble), bounded.
func TestReview169HealthyRealTime(t *testing.T) {
	for _, tc := range r169Cases() {
		if tc.tiny() {
			continue
		}
		for _, lat := range []time.Duration{0, 200 * time.Microsecond} {
			t.Run(fmt.Sprintf("%s/lat=%v", tc.name, lat), func(t *testing.T) {
				p := pipeline.New(tc.mk()...)
				done := make(chan struct{})
				go func() {
					defer close(done)
					r169Healthy(t, p, 50, lat)
				}()
				select {
				case <-done:
				case <-time.After(5 * time.Second):
					t.Fatalf("50 calls to a healthy dependency did not end in 5 s")
				}
				if b := p.Stages().Breaker; b != nil {
					b.Close()
				}
			})
		}
	}
}

// TestReview169ConcurrentHealthyHedge: concurrent healthy calls with hedge
// delay 1 ns and MaxExtra MaxInt, and a limit: no call fails (hedges are
// refused by the limit silently, never the call).
func TestReview169ConcurrentHealthyHedge(t *testing.T) {
	for _, n := range []int{1, 2, 4, 64} {
		t.Run(fmt.Sprintf("limit=%d", n), func(t *testing.T) {
			p := pipeline.New(
				pipeline.WithHedging(hedge.New(hedge.Delay(1), hedge.MaxExtra(math.MaxInt), hedge.MaxShare(1))),
				pipeline.WithLimit(limit.NewFixed(n, limit.MaxWaiting(math.MaxInt))),
				pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(0))),
				pipeline.WithTimeBudget(r169Max),
			)
			var failed atomic.Int64
			var firstErr atomic.Value
			deadline := time.Now().Add(2 * time.Second)
			done := make(chan struct{})
			for w := range 8 {
				go func() {
					defer func() { done <- struct{}{} }()
					for i := 0; i < 100 && time.Now().Before(deadline); i++ {
						_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
							time.Sleep(50 * time.Microsecond)
							return w, nil
						})
						if err != nil {
							failed.Add(1)
							firstErr.CompareAndSwap(nil, err.Error())
						}
					}
				}()
			}
			for range 8 {
				select {
				case <-done:
				case <-time.After(5 * time.Second):
					t.Fatal("hung")
				}
			}
			if failed.Load() > 0 {
				t.Fatalf("%d calls to a healthy dependency failed, first: %v", failed.Load(), firstErr.Load())
			}
		})
	}
}

// TestReview169ConstructorPanics: each documented-invalid value panics
// at construction with a message naming its package; each accepted one
// does not.
func TestReview169ConstructorPanics(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	cases := []struct {
		name   string
		pkg    string
		panics bool
		f      func()
	}{
		{"WithTimeBudget(-1)", "pipeline", true, func() { pipeline.WithTimeBudget(-1) }},
		{"WithTimeBudget(MinInt64)", "pipeline", true, func() { pipeline.WithTimeBudget(math.MinInt64) }},
		{"WithTimeBudget(1)", "pipeline", false, func() { pipeline.New(pipeline.WithTimeBudget(1)) }},
		{"WithAttemptTimeout(-1)", "pipeline", true, func() { pipeline.WithAttemptTimeout(-1) }},
		{"WithAttemptTimeout(MaxInt64)", "pipeline", false, func() { pipeline.New(pipeline.WithAttemptTimeout(r169Max)) }},

		{"breaker.FailureRate(NaN)", "breaker", true, func() { breaker.FailureRate(nan, 1) }},
		{"breaker.FailureRate(+Inf)", "breaker", true, func() { breaker.FailureRate(inf, 1) }},
		{"breaker.FailureRate(-Inf)", "breaker", true, func() { breaker.FailureRate(-inf, 1) }},
		{"breaker.FailureRate(0)", "breaker", true, func() { breaker.FailureRate(0, 1) }},
		{"breaker.FailureRate(-0)", "breaker", true, func() { breaker.FailureRate(math.Copysign(0, -1), 1) }},
		{"breaker.FailureRate(1+eps)", "breaker", true, func() { breaker.FailureRate(math.Nextafter(1, 2), 1) }},
		{"breaker.FailureRate(1e-300)", "breaker", false, func() { breaker.New("x", breaker.FailureRate(1e-300, 0)) }},
		{"breaker.FailureRate(5e-324)", "breaker", false, func() { breaker.New("x", breaker.FailureRate(5e-324, math.MaxUint32)) }},
		{"breaker.Window(-1,1)", "breaker", true, func() { breaker.Window(-1, 1) }},
		{"breaker.Window(1ns,1)", "breaker", true, func() { breaker.Window(1, 1) }},
		{"breaker.Window(99ms,100)", "breaker", true, func() { breaker.Window(99*time.Millisecond, 100) }},
		{"breaker.Window(1s,0)", "breaker", true, func() { breaker.Window(time.Second, 0) }},
		{"breaker.Window(1s,-1)", "breaker", true, func() { breaker.Window(time.Second, -1) }},
		{"breaker.Window(1s,101)", "breaker", true, func() { breaker.Window(time.Second, 101) }},
		{"breaker.Window(1s,MaxInt)", "breaker", true, func() { breaker.Window(time.Second, math.MaxInt) }},
		{"breaker.Window(max,MaxUint32)", "breaker", true, func() { breaker.Window(r169Max, math.MaxUint32) }},
		{"breaker.Window(1ns,MaxUint32)", "breaker", true, func() { breaker.Window(1, math.MaxUint32) }},
		{"breaker.Window(max,1)", "breaker", false, func() { breaker.New("x", breaker.Window(r169Max, 1)) }},
		{"breaker.Window(1s,MinInt)", "breaker", true, func() { breaker.Window(time.Second, math.MinInt) }},
		{"breaker.Window(max,100)", "breaker", false, func() { breaker.New("x", breaker.Window(r169Max, 100)) }},
		{"breaker.Window(0,1)", "breaker", false, func() { breaker.New("x", breaker.Window(0, 1)) }},
		{"breaker.OpenTimeout(0)", "breaker", true, func() { breaker.OpenTimeout(0) }},
		{"breaker.OpenTimeout(-1)", "breaker", true, func() { breaker.OpenTimeout(-1) }},
		{"breaker.OpenTimeout(max)", "breaker", false, func() { breaker.New("x", breaker.OpenTimeout(r169Max)) }},
		{"breaker.FlushInterval(0)", "breaker", true, func() { breaker.FlushInterval(0) }},
		{"breaker.FlushInterval(max)", "breaker", true, func() { breaker.FlushInterval(r169Max) }},
		{"breaker.FlushInterval(MaxFlush+1)", "breaker", true, func() { breaker.FlushInterval(breaker.MaxFlushInterval + 1) }},
		{"breaker.NewGroup(0)", "breaker", true, func() { breaker.NewGroup[string](0, func(string) *breaker.Breaker { return nil }) }},
		{"breaker.NewGroup(MaxInt)", "breaker", false, func() {
			breaker.NewGroup[string](math.MaxInt, func(string) *breaker.Breaker { return nil })
		}},

		{"retrypolicy.MaxAttempts(-1)", "retrypolicy", true, func() { retrypolicy.MaxAttempts(-1) }},
		{"retrypolicy.MaxAttempts(MinInt)", "retrypolicy", true, func() { retrypolicy.MaxAttempts(math.MinInt) }},
		{"retrypolicy.BaseDelay(-1)", "retrypolicy", true, func() { retrypolicy.BaseDelay(-1) }},
		{"retrypolicy.MaxDelay(0)", "retrypolicy", true, func() { retrypolicy.MaxDelay(0) }},
		{"retrypolicy.MaxDelay(-1)", "retrypolicy", true, func() { retrypolicy.MaxDelay(-1) }},
		{"retrypolicy.Jitter(4)", "retrypolicy", true, func() { retrypolicy.Jitter(4) }},
		{"retrypolicy.Jitter(255)", "retrypolicy", true, func() { retrypolicy.Jitter(255) }},
		{"retrypolicy.NewQuota(NaN)", "retrypolicy", true, func() { retrypolicy.NewQuota(nan, 1, 0) }},
		{"retrypolicy.NewQuota(Inf)", "retrypolicy", true, func() { retrypolicy.NewQuota(inf, 1, 0) }},
		{"retrypolicy.NewQuota(-1e-300)", "retrypolicy", true, func() { retrypolicy.NewQuota(-1e-300, 1, 0) }},
		{"retrypolicy.NewQuota(floor NaN)", "retrypolicy", true, func() { retrypolicy.NewQuota(0.1, nan, 0) }},
		{"retrypolicy.NewQuota(floor -Inf)", "retrypolicy", true, func() { retrypolicy.NewQuota(0.1, -inf, 0) }},
		{"retrypolicy.NewQuota(window 1ns)", "retrypolicy", true, func() { retrypolicy.NewQuota(0.1, 1, 1) }},
		{"retrypolicy.NewQuota(window -1)", "retrypolicy", true, func() { retrypolicy.NewQuota(0.1, 1, -1) }},
		{"retrypolicy.NewQuota(-0)", "retrypolicy", false, func() { retrypolicy.NewQuota(math.Copysign(0, -1), math.Copysign(0, -1), 0) }},

		{"throttle.K(NaN)", "throttle", true, func() { throttle.K(nan) }},
		{"throttle.K(Inf)", "throttle", true, func() { throttle.K(inf) }},
		{"throttle.K(-Inf)", "throttle", true, func() { throttle.K(-inf) }},
		{"throttle.K(0)", "throttle", true, func() { throttle.K(0) }},
		{"throttle.K(1e-300)", "throttle", true, func() { throttle.K(1e-300) }},
		{"throttle.K(1)", "throttle", true, func() { throttle.K(1) }},
		{"throttle.K(1.0999)", "throttle", true, func() { throttle.K(math.Nextafter(1.1, 0)) }},
		{"throttle.K(1.1)", "throttle", false, func() { throttle.New(throttle.K(1.1)) }},
		{"throttle.Window(0)", "throttle", true, func() { throttle.Window(0) }},
		{"throttle.Window(10ms-1)", "throttle", true, func() { throttle.Window(10*time.Millisecond - 1) }},
		{"throttle.Window(-max)", "throttle", true, func() { throttle.Window(-r169Max) }},

		{"limit.NewFixed(0)", "limit", true, func() { limit.NewFixed(0) }},
		{"limit.NewFixed(MinInt)", "limit", true, func() { limit.NewFixed(math.MinInt) }},
		{"limit.NewFixed(1, Max(5))", "limit", true, func() { limit.NewFixed(1, limit.Max(5)) }},
		{"limit.Initial(0)", "limit", true, func() { limit.Initial(0) }},
		{"limit.Min(0)", "limit", true, func() { limit.Min(0) }},
		{"limit.Max(0)", "limit", true, func() { limit.Max(0) }},
		{"limit.Max(-1)", "limit", true, func() { limit.Max(-1) }},
		{"limit.Backoff(NaN)", "limit", true, func() { limit.Backoff(nan) }},
		{"limit.Backoff(1)", "limit", true, func() { limit.Backoff(1) }},
		{"limit.Backoff(Inf)", "limit", true, func() { limit.Backoff(inf) }},
		{"limit.Backoff(0.4999)", "limit", true, func() { limit.Backoff(math.Nextafter(0.5, 0)) }},
		{"limit.Backoff(-Inf)", "limit", true, func() { limit.Backoff(-inf) }},
		{"limit.MaxWaiting(-1)", "limit", true, func() { limit.MaxWaiting(-1) }},
		{"limit.NewAIMD(Min>Initial)", "limit", true, func() { limit.NewAIMD(limit.Min(21)) }},
		{"limit.NewAIMD(Initial>Max)", "limit", true, func() { limit.NewAIMD(limit.Max(19)) }},

		{"hedge.Delay(0)", "hedge", true, func() { hedge.Delay(0) }},
		{"hedge.Delay(-1)", "hedge", true, func() { hedge.Delay(-1) }},
		{"hedge.MaxExtra(0)", "hedge", true, func() { hedge.MaxExtra(0) }},
		{"hedge.MaxExtra(MinInt)", "hedge", true, func() { hedge.MaxExtra(math.MinInt) }},
		{"hedge.MaxShare(0)", "hedge", true, func() { hedge.MaxShare(0) }},
		{"hedge.MaxShare(NaN)", "hedge", true, func() { hedge.MaxShare(nan) }},
		{"hedge.MaxShare(Inf)", "hedge", true, func() { hedge.MaxShare(inf) }},
		{"hedge.MaxShare(1+eps)", "hedge", true, func() { hedge.MaxShare(math.Nextafter(1, 2)) }},
		{"hedge.Quantile(0)", "hedge", true, func() { hedge.Quantile(0) }},
		{"hedge.Quantile(1)", "hedge", true, func() { hedge.Quantile(1) }},
		{"hedge.Quantile(NaN)", "hedge", true, func() { hedge.Quantile(nan) }},
		{"hedge.Quantile(-Inf)", "hedge", true, func() { hedge.Quantile(-inf) }},
		{"hedge.Quantile(5e-324)", "hedge", false, func() { hedge.New(hedge.Quantile(5e-324)) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got any
			func() {
				defer func() { got = recover() }()
				tc.f()
			}()
			switch {
			case tc.panics && got == nil:
				t.Fatalf("%s: no panic, the doc says it panics", tc.name)
			case !tc.panics && got != nil:
				t.Fatalf("%s: panicked with %v, the doc accepts it", tc.name, got)
			case got != nil:
				msg := fmt.Sprint(got)
				if !strings.HasPrefix(msg, tc.pkg+":") {
					t.Fatalf("%s: panic message %q does not name package %s", tc.name, msg, tc.pkg)
				}
			}
		})
	}
}

// TestReview169WaitOpenTimeoutMax: a breaker with OpenTimeout MaxInt64,
// opened, with WaitWhenOpen and a 1 s budget: the doc says a call whose
// deadline comes before the breaker's next probe fails at once.
func TestReview169WaitOpenTimeoutMax(t *testing.T) {
	for _, budget := range []time.Duration{time.Second, r169Max / 2, r169Max - 1} {
		t.Run(budget.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := breaker.New("r169", breaker.OpenTimeout(r169Max), breaker.ConsecutiveFailures(1))
				p := pipeline.New(pipeline.WithBreaker(b), pipeline.WaitWhenOpen(), pipeline.WithTimeBudget(budget))
				boom := errors.New("boom")
				_, _ = pipeline.Do(context.Background(), p, func(context.Context) (int, error) { return 0, boom })
				if b.State() != resilience.StateOpen {
					t.Fatalf("state %v after a failure with ConsecutiveFailures(1)", b.State())
				}
				start := time.Now()
				_, err := pipeline.Do(context.Background(), p, func(context.Context) (int, error) { return 1, nil })
				if err == nil {
					t.Fatalf("a call went through a breaker open for 292 years")
				}
				if el := time.Since(start); el != 0 {
					t.Fatalf("a call whose budget (%v) ends before the next probe waited %v, err %v", budget, el, err)
				}
				if !errors.Is(err, breaker.ErrOpen) {
					t.Fatalf("err %v does not match ErrOpen", err)
				}
			})
		})
	}
}

// TestReview169WaitOpenTimeout1ns: OpenTimeout(1ns) with WaitWhenOpen: a
// call after an opening waits at most ~1 ns and probes; a healthy
// dependency then serves it.
func TestReview169WaitOpenTimeout1ns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("r169", breaker.OpenTimeout(1), breaker.ConsecutiveFailures(1))
		p := pipeline.New(pipeline.WithBreaker(b), pipeline.WaitWhenOpen(), pipeline.WithTimeBudget(time.Second))
		_, _ = pipeline.Do(context.Background(), p, func(context.Context) (int, error) { return 0, errors.New("boom") })
		start := time.Now()
		for i := range 20 {
			if _, err := pipeline.Do(context.Background(), p, func(context.Context) (int, error) { return 1, nil }); err != nil {
				t.Fatalf("call %d after the dependency came back: %v", i, err)
			}
		}
		if el := time.Since(start); el > time.Millisecond {
			t.Fatalf("20 calls with a 1 ns open timeout took %v", el)
		}
	})
}

// TestReview169RetryOverflowCombos: a dependency failing transiently k
// times, then healthy, with MaxDelay/BaseDelay near MaxInt64 and a budget
// near MaxInt64: either it succeeds, or gives up with ErrOutOfTime; never
// a negative/zero delay storm (the attempts it makes are bounded by
// those the delays can fit), never a panic.
func TestReview169RetryOverflowCombos(t *testing.T) {
	for _, j := range []retrypolicy.JitterMode{retrypolicy.Full, retrypolicy.Equal, retrypolicy.Decorrelated, retrypolicy.None} {
		for _, base := range []time.Duration{1, time.Second, r169Max / 2, r169Max - 1, r169Max} {
			t.Run(fmt.Sprintf("%v/base=%d", j, base), func(t *testing.T) {
				var delays []time.Duration
				pol := retrypolicy.New(retrypolicy.Jitter(j), retrypolicy.BaseDelay(base), retrypolicy.MaxDelay(r169Max),
					retrypolicy.MaxAttempts(200), retrypolicy.WithSleep(func(ctx context.Context, d time.Duration) error {
						delays = append(delays, d)
						return nil
					}))
				n := 0
				_, err := retrypolicy.Do(context.Background(), pol, func(context.Context) (int, error) {
					n++
					if n < 150 {
						return 0, errors.New("transient")
					}
					return n, nil
				})
				if err != nil {
					t.Fatalf("after %d attempts: %v", n, err)
				}
				for i, d := range delays {
					if d < 0 {
						t.Fatalf("delay %d is negative: %v (all: %v)", i, d, delays[:min(len(delays), 70)])
					}
				}
				if j == retrypolicy.None {
					// exactly min(base*2^i, max): monotone, no wrap
					for i := 1; i < len(delays); i++ {
						if delays[i] < delays[i-1] {
							t.Fatalf("Jitter(None) delay %d (%v) below the one before (%v)", i, delays[i], delays[i-1])
						}
					}
				}
			})
		}
	}
}

// TestReview169BudgetMaxRetries: budget MaxInt64 (and near) with real
// sleeps in a bubble, base 1 s, max MaxInt64/4: a dependency failing 3
// times then healthy is served; no overflow in the budget's look-ahead.
func TestReview169BudgetMaxRetries(t *testing.T) {
	for _, budget := range []time.Duration{r169Max, r169Max - 1, r169Max / 2} {
		for _, at := range []time.Duration{0, time.Second, r169Max} {
			t.Run(fmt.Sprintf("budget=%d/attempt=%d", budget, at), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					p := pipeline.New(pipeline.WithTimeBudget(budget), pipeline.WithAttemptTimeout(at),
						pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(0), retrypolicy.Jitter(retrypolicy.None),
							retrypolicy.BaseDelay(time.Second), retrypolicy.MaxDelay(r169Max/4))))
					n := 0
					got, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
						if _, ok := ctx.Deadline(); !ok {
							return 0, resilience.Permanent(errors.New("no deadline on the attempt's context"))
						}
						if err := ctx.Err(); err != nil {
							return 0, resilience.Permanent(fmt.Errorf("attempt context done at once: %w", err))
						}
						n++
						if n <= 3 {
							return 0, errors.New("transient")
						}
						return n, nil
					})
					if err != nil || got != 4 {
						t.Fatalf("got %d, %v", got, err)
					}
				})
			})
		}
	}
}

// TestReview169SmallBudgetsRealTime: small but workable budgets (around
// the lazy context's 1 ms fresh margin) with every stage, against a
// dependency that answers at once: no call fails.
func TestReview169SmallBudgetsRealTime(t *testing.T) {
	for _, budget := range []time.Duration{time.Millisecond - 1, time.Millisecond, time.Millisecond + 1, 5 * time.Millisecond} {
		t.Run(budget.String(), func(t *testing.T) {
			p := pipeline.New(pipeline.WithTimeBudget(budget), pipeline.WithAttemptTimeout(budget),
				pipeline.WithBreaker(breaker.New("r169", breaker.OpenTimeout(1), breaker.Window(time.Millisecond, 1), breaker.ConsecutiveFailures(1))),
				pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(0))),
				pipeline.WithThrottle(throttle.New(throttle.K(1.1), throttle.Window(10*time.Millisecond))),
				pipeline.WithLimit(limit.NewFixed(1)))
			failed, total := 0, 0
			var first error
			stop := time.Now().Add(300 * time.Millisecond)
			for time.Now().Before(stop) {
				total++
				if _, err := pipeline.Do(context.Background(), p, func(context.Context) (int, error) { return 1, nil }); err != nil {
					failed++
					if first == nil {
						first = err
					}
				}
			}
			t.Logf("budget %v: %d of %d calls failed (first: %v)", budget, failed, total, first)
			if budget >= 5*time.Millisecond && failed > 0 {
				t.Fatalf("budget %v: %d of %d calls to a dependency answering at once failed: %v", budget, failed, total, first)
			}
		})
	}
}

// TestReview169WaitOpenFlappingRealTime: OpenTimeout(1ns), WaitWhenOpen,
// ConsecutiveFailures(1): a dependency failing for 50 ms and then healthy;
// every call that starts once it has been back for 50 ms succeeds.
func TestReview169WaitOpenFlappingRealTime(t *testing.T) {
	for _, hor := range []uint32{0, 1, math.MaxUint32} {
		t.Run(fmt.Sprint(hor), func(t *testing.T) {
			b := breaker.New("r169", breaker.OpenTimeout(1), breaker.ConsecutiveFailures(1), breaker.HalfOpenRequests(hor))
			p := pipeline.New(pipeline.WithBreaker(b), pipeline.WaitWhenOpen(), pipeline.WithTimeBudget(time.Second),
				pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(0), retrypolicy.MaxAttempts(0))))
			start := time.Now()
			back := start.Add(50 * time.Millisecond)
			var late atomic.Int64
			var lateErr atomic.Value
			done := make(chan struct{})
			for range 8 {
				go func() {
					defer func() { done <- struct{}{} }()
					for time.Since(start) < 300*time.Millisecond {
						began := time.Now()
						_, err := pipeline.Do(context.Background(), p, func(context.Context) (int, error) {
							if time.Now().Before(back) {
								return 0, errors.New("down")
							}
							return 1, nil
						})
						if err != nil && began.After(back.Add(50*time.Millisecond)) {
							late.Add(1)
							lateErr.CompareAndSwap(nil, err.Error())
						}
					}
				}()
			}
			for range 8 {
				select {
				case <-done:
				case <-time.After(5 * time.Second):
					t.Fatal("hung")
				}
			}
			if late.Load() > 0 {
				t.Fatalf("%d calls started 50 ms after the dependency came back failed: %v", late.Load(), lateErr.Load())
			}
		})
	}
}

// TestReview169MaxEverythingRecovers: every option at its maximum, a
// dependency failing its first attempts (transient), in a bubble: the
// call either succeeds or gives up as documented (ErrOutOfTime), with no
// panic and no hang; with Jitter(None) and MaxDelay 1 h it must succeed.
func TestReview169MaxEverythingRecovers(t *testing.T) {
	for _, md := range []time.Duration{time.Hour, r169Max / 4, r169Max} {
		t.Run(md.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := breaker.New("r169", breaker.OpenTimeout(r169Max), breaker.Window(r169Max, breaker.MaxBuckets),
					breaker.HalfOpenRequests(math.MaxUint32), breaker.ConsecutiveFailures(math.MaxUint32))
				p := pipeline.New(
					pipeline.WithTimeBudget(r169Max), pipeline.WithAttemptTimeout(r169Max), pipeline.WithBreaker(b),
					pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(math.MaxInt), retrypolicy.BaseDelay(time.Second), retrypolicy.MaxDelay(md),
						retrypolicy.Jitter(retrypolicy.None),
						retrypolicy.WithQuota(retrypolicy.NewQuota(math.MaxFloat64, math.MaxFloat64, r169Max)))),
					pipeline.WithThrottle(throttle.New(throttle.K(math.MaxFloat64), throttle.Window(r169Max))),
					pipeline.WithLimit(limit.NewFixed(math.MaxInt, limit.MaxWaiting(math.MaxInt))),
					pipeline.WithHedging(hedge.New(hedge.Delay(r169Max), hedge.MaxExtra(math.MaxInt), hedge.MaxShare(1))),
					pipeline.WaitWhenOpen(),
				)
				n := 0
				got, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
					if n++; n <= 5 {
						return 0, errors.New("transient")
					}
					return n, nil
				})
				if md == time.Hour && (err != nil || got != 6) {
					t.Fatalf("got %d, %v", got, err)
				}
				if err != nil && !errors.Is(err, retrypolicy.ErrOutOfTime) {
					t.Fatalf("gave up with %v", err)
				}
				t.Logf("max delay %v: %d attempts, err %v, fake time %v", md, n, err, time.Now())
			})
		})
	}
}

// TestReview169AIMDQueueHealthy: an adaptive limit pinned at 1 with an
// unbounded queue, OldestOnTime and budgets: concurrent healthy calls
// wait their turn and all succeed within their budget.
func TestReview169AIMDQueueHealthy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := pipeline.New(pipeline.WithTimeBudget(time.Second),
			pipeline.WithLimit(limit.NewAIMD(limit.Min(1), limit.Initial(1), limit.Max(1), limit.Backoff(0.5), limit.OldestOnTime(), limit.MaxWaiting(math.MaxInt))),
			pipeline.WithHedging(hedge.New(hedge.Delay(1), hedge.MaxExtra(math.MaxInt), hedge.MaxShare(1))),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(0))))
		errs := make(chan error, 50)
		for range 50 {
			go func() {
				_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
					time.Sleep(time.Millisecond)
					return 1, nil
				})
				errs <- err
			}()
		}
		for range 50 {
			if err := <-errs; err != nil {
				t.Fatalf("a healthy call through a limit of 1 with a queue (50 x 1 ms within 1 s): %v", err)
			}
		}
	})
}

// TestReview169HealthyConcurrentRealTime: the extreme pipelines (but
// those whose limit of 1 refuses concurrent calls by design) under 8
// concurrent callers: no call to the healthy dependency fails.
func TestReview169HealthyConcurrentRealTime(t *testing.T) {
	for _, tc := range r169Cases() {
		if tc.tiny() || strings.Contains(tc.name, "limit fixed 1") || strings.Contains(tc.name, "all 1") ||
			strings.Contains(tc.name, "at min") || strings.Contains(tc.name, "gates") {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			p := pipeline.New(tc.mk()...)
			var failed atomic.Int64
			var first atomic.Value
			done := make(chan struct{})
			for w := range 8 {
				go func() {
					defer func() { done <- struct{}{} }()
					for i := range 50 {
						got, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
							if i%2 == 0 {
								time.Sleep(100 * time.Microsecond)
							}
							return w*1000 + i, nil
						})
						if err != nil || got != w*1000+i {
							failed.Add(1)
							first.CompareAndSwap(nil, fmt.Sprintf("%d, %v", got, err))
						}
					}
				}()
			}
			for range 8 {
				select {
				case <-done:
				case <-time.After(5 * time.Second):
					t.Fatal("hung")
				}
			}
			if failed.Load() > 0 {
				t.Fatalf("%d of 400 calls failed, first: %v", failed.Load(), first.Load())
			}
			if b := p.Stages().Breaker; b != nil {
				b.Close()
			}
		})
	}
}

// TestReview169NestedMaxBudgets: a pipeline whose operation calls another,
// both with budgets and attempt timeouts at or near MaxInt64, on the real
// clock (monotonic readings saturate there, not in a bubble): healthy
// calls succeed, and the inner operation sees a deadline in the future.
func TestReview169NestedMaxBudgets(t *testing.T) {
	for _, d := range []time.Duration{r169Max, r169Max - 1, r169Max - time.Hour, r169Max / 2} {
		t.Run(fmt.Sprint(int64(d)), func(t *testing.T) {
			inner := pipeline.New(pipeline.WithTimeBudget(d), pipeline.WithAttemptTimeout(d), pipeline.WithBreaker(breaker.New("in")),
				pipeline.WithRetry(retrypolicy.New()), pipeline.WithHedging(hedge.New(hedge.Delay(d))))
			outer := pipeline.New(pipeline.WithTimeBudget(d), pipeline.WithAttemptTimeout(d), pipeline.WithBreaker(breaker.New("out")),
				pipeline.WithRetry(retrypolicy.New()), pipeline.WithHedging(hedge.New(hedge.Delay(d))))
			for i := range 20 {
				got, err := pipeline.Do(context.Background(), outer, func(ctx context.Context) (int, error) {
					return pipeline.Do(ctx, inner, func(ctx context.Context) (int, error) {
						dl, ok := ctx.Deadline()
						if !ok || !dl.After(time.Now().Add(time.Hour)) || ctx.Err() != nil {
							return 0, resilience.Permanent(fmt.Errorf("inner deadline %v (%v), err %v", dl, ok, ctx.Err()))
						}
						select {
						case <-ctx.Done():
							return 0, ctx.Err()
						default:
						}
						return i, nil
					})
				})
				if err != nil || got != i {
					t.Fatalf("call %d: %d, %v", i, got, err)
				}
			}
		})
	}
}
