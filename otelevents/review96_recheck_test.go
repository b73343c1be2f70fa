package otelevents

import (
	"context"
	"errors"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
)

type review96Tr struct{}
type review96CT struct{}

func (review96Tr) StartCall(ctx context.Context, _ string) (context.Context, resilience.CallTrace) {
	return ctx, review96CT{}
}
func (review96CT) StartAttempt(ctx context.Context, _ resilience.AttemptInfo) (context.Context, func(error)) {
	return ctx, func(error) {}
}
func (review96CT) End(error) {}

func review96Rejections(t *testing.T, r *sdkmetric.ManualReader) int64 {
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == "resilience.rejections" {
				if s, ok := m.Data.(metricdata.Sum[int64]); ok {
					for _, dp := range s.DataPoints {
						n += dp.Value
					}
				}
			}
		}
	}
	return n
}

// A call whose only attempt the breaker's re-check refuses (it opened as
// the attempt waited for the slot) returns the breaker's rejection: the
// rejections counter should count it, whether or not the call is traced
// or hedged.
func TestReview96RecheckRefusalCounted(t *testing.T) {
	for _, mode := range []string{"plain", "tracer", "hedge"} {
		reader := sdkmetric.NewManualReader()
		l, err := New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
		if err != nil {
			t.Fatal(err)
		}
		b := breaker.New("b96"+mode, breaker.ConsecutiveFailures(1), breaker.OpenTimeout(time.Minute))
		opts := []pipeline.Option{pipeline.WithName("p96" + mode), pipeline.WithBreaker(b), pipeline.WithLimit(limit.NewFixed(1, limit.MaxWaiting(10))), pipeline.WithListener(l)}
		switch mode {
		case "tracer":
			opts = append(opts, pipeline.WithTracer(review96Tr{}))
		case "hedge":
			opts = append(opts, pipeline.WithHedging(hedge.New(hedge.Delay(time.Second))))
		}
		p := pipeline.New(opts...)
		release, in := make(chan struct{}), make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) { close(in); <-release; return 1, nil })
		}()
		<-in
		res := make(chan error, 1)
		go func() {
			_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) { return 1, nil })
			res <- err
		}()
		time.Sleep(20 * time.Millisecond)
		_ = b.Execute(context.Background(), func(context.Context) error { return errors.New("x") })
		if b.State() != resilience.StateOpen {
			t.Fatalf("rig: %v", b.State())
		}
		close(release)
		<-done
		errA := <-res
		got := review96Rejections(t, reader)
		t.Logf("%s: call err=%v class=%v; rejections=%d", mode, errA, resilience.Classify(errA), got)
		if errA != nil && got != 1 {
			t.Errorf("%s: the call was refused by the breaker, resilience.rejections=%d", mode, got)
		}
	}
}
