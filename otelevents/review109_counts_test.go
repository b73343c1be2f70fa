package otelevents_test

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/otelevents"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// A pipeline whose stages before the breaker have nothing to do (breaker,
// no budget, no tracer, no hedging) and a Listener that samples durations:
// a call the Listener declined to time goes straight into the breaker.
// An operation that panics or calls runtime.Goexit must still be counted
// once in resilience.calls, as it is when the call is timed.
func TestReview109SampledPanicCounted(t *testing.T) {
	for _, how := range []string{"panic", "goexit"} {
		for _, sample := range []int{1, 1 << 30} {
			t.Run(how+"/sample="+itoa(int64(sample)), func(t *testing.T) {
				l, rd := r109New(t, otelevents.SampleDurations(sample))
				p := pipeline.New(pipeline.WithName("dep"),
					pipeline.WithBreaker(breaker.New("dep", breaker.ConsecutiveFailures(1<<20))),
					pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(2), retrypolicy.BaseDelay(0))),
					pipeline.WithListener(l))
				const n = 20
				for range n {
					done := make(chan struct{})
					go func() {
						defer close(done)
						defer func() { _ = recover() }()
						_, _ = pipeline.Do(context.Background(), p, func(context.Context) (int, error) {
							if how == "panic" {
								panic("boom")
							}
							runtime.Goexit()
							return 0, nil
						})
					}()
					<-done
				}
				s := r109Sums(t, rd)
				if got := r109Total(s["resilience.calls"]); got != n {
					t.Errorf("resilience.calls = %d for %d calls that ended (%s)", got, n, r109Fmt(s))
				}
				if got := r109Total(s["resilience.attempts"]); got != n {
					t.Errorf("resilience.attempts = %d for %d attempts (%s)", got, n, r109Fmt(s))
				}
			})
		}
	}
}

// The package doc: a call whose context has ended before it starts is
// not run, and has no span; a Listener counts it canceled if its context
// was canceled, and rejected, with a give-up (time_budget_exceeded), if
// its deadline had passed.
func TestReview109EndedBeforeStart(t *testing.T) {
	for _, how := range []string{"canceled", "deadline"} {
		t.Run(how, func(t *testing.T) {
			l, rd := r109New(t)
			p := pipeline.New(pipeline.WithName("dep"),
				pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3))),
				pipeline.WithTimeBudget(time.Second),
				pipeline.WithListener(l))
			var ctx context.Context
			var cancel context.CancelFunc
			if how == "canceled" {
				ctx, cancel = context.WithCancel(context.Background())
			} else {
				ctx, cancel = context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
			}
			cancel()
			ran := false
			_, err := pipeline.Do(ctx, p, func(context.Context) (int, error) { ran = true; return 1, nil })
			if ran || err == nil {
				t.Fatalf("ran %v err %v", ran, err)
			}
			s := r109Sums(t, rd)
			outcome, giveups := "canceled", int64(0)
			if how == "deadline" {
				outcome, giveups = "rejected", 1
			}
			if got := s["resilience.calls"]["dep|"+outcome]; got != 1 || r109Total(s["resilience.calls"]) != 1 {
				t.Errorf("calls %v, want one %s (err %v) (%s)", s["resilience.calls"], outcome, err, r109Fmt(s))
			}
			if got := r109Total(s["resilience.giveups"]); got != giveups || s["resilience.giveups"]["dep|time_budget_exceeded"] != giveups {
				t.Errorf("giveups %v, want %d time_budget_exceeded (%s)", s["resilience.giveups"], giveups, r109Fmt(s))
			}
		})
	}
}

// resilience.call.duration is in seconds: its buckets must tell a 10 ms
// call from a 100 ms and a 1 s one, or the quantiles the package doc
// promises from it ("the histogram gives the distribution, its quantiles
// estimated") cannot be had.
func TestReview109DurationBuckets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, rd := r109New(t)
		p := pipeline.New(pipeline.WithName("dep"), pipeline.WithListener(l))
		for _, d := range []time.Duration{10 * time.Millisecond, 100 * time.Millisecond, time.Second, 3 * time.Second} {
			_, _ = pipeline.Do(context.Background(), p, func(context.Context) (int, error) {
				time.Sleep(d)
				return 1, nil
			})
		}
		rm := r109Collect(t, rd)
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if m.Name != "resilience.call.duration" {
					continue
				}
				h := m.Data.(metricdata.Histogram[float64])
				for _, dp := range h.DataPoints {
					used := 0
					for _, c := range dp.BucketCounts {
						if c > 0 {
							used++
						}
					}
					t.Logf("bounds %v counts %v sum %v", dp.Bounds, dp.BucketCounts, dp.Sum)
					if used < 3 {
						t.Errorf("calls of 10 ms, 100 ms, 1 s and 3 s fall in %d bucket(s) of bounds %v (seconds): no quantile can be estimated", used, dp.Bounds)
					}
				}
				return
			}
		}
		t.Fatal("no resilience.call.duration")
	})
}

var _ = errors.New
