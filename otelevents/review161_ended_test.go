package otelevents_test

import (
	"context"
	"errors"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/otelevents"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// A call whose context ended before it started: not run, no span;
// counted canceled (canceled ctx) or rejected with a give-up
// time_budget_exceeded and a duration of 0 (deadline passed).
func TestReview161_EndedBeforeStart(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	rd := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(rd))
	l, err := otelevents.New(mp)
	if err != nil {
		t.Fatal(err)
	}
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	p := pipeline.New(pipeline.WithName("ended161"), pipeline.WithListener(l), pipeline.WithTracer(otelevents.NewTracer(tp)),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(0))))
	ran := 0
	op := func(ctx context.Context) (int, error) { ran++; return 1, nil }
	cctx, cancel := context.WithCancel(context.Background())
	cancel()
	pipeline.Do(cctx, p, op)
	dctx, dcancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer dcancel()
	pipeline.Do(dctx, p, op)
	if ran != 0 {
		t.Errorf("op ran %d times", ran)
	}
	if n := len(sr.Ended()); n != 0 {
		t.Errorf("%d spans", n)
	}
	s := review161Sums(t, rd)
	if s["resilience.calls"]["canceled"] != 1 || s["resilience.calls"]["rejected"] != 1 {
		t.Errorf("calls %v", s["resilience.calls"])
	}
	if s["resilience.giveups"]["time_budget_exceeded"] != 1 {
		t.Errorf("giveups %v", s["resilience.giveups"])
	}
	var rm metricdata.ResourceMetrics
	rd.Collect(context.Background(), &rm)
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if h, ok := m.Data.(metricdata.Histogram[float64]); ok {
				for _, dp := range h.DataPoints {
					if dp.Sum != 0 {
						t.Errorf("duration sum %v for calls never run", dp.Sum)
					}
				}
			}
		}
	}
	tp.Shutdown(context.Background())
	mp.Shutdown(context.Background())
}

// An open breaker's rejections, and a full limit's refusals, are counted
// as documented: rejections for the breaker's, attempts of outcome
// rejected for the limit's.
func TestReview161_RefusalsCounted(t *testing.T) {
	rd := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(rd))
	l, _ := otelevents.New(mp)
	b := breaker.New("ref161", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(time.Hour))
	p := pipeline.New(pipeline.WithName("ref161"), pipeline.WithListener(l), pipeline.WithBreaker(b),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(1))))
	pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) { return 0, errors.New("x") })
	for range 5 {
		pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) { return 1, nil })
	}
	s := review161Sums(t, rd)
	if s["resilience.rejections"][""] != 5 {
		t.Errorf("rejections %v, want 5", s["resilience.rejections"])
	}
	if s["resilience.calls"]["terminal"]+s["resilience.calls"]["rejected"] != 5 {
		t.Errorf("calls %v", s["resilience.calls"])
	}
}
