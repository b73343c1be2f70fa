package otelevents_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/resiliencekit/resiliencekit/otelevents"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// Receipt, Order and paymentsClient stand in for a payments service's SDK.
type Receipt struct{ ID string }

type Order struct{ ID string }

// paymentsClient answers "busy, retry in 20 ms" twice, then charges.
type paymentsClient struct{ calls int }

func (c *paymentsClient) Charge(ctx context.Context, o Order) (Receipt, error) {
	if c.calls++; c.calls <= 2 {
		return Receipt{}, resilience.RetryAfter(errors.New("503 busy"), 20*time.Millisecond)
	}
	return Receipt{ID: "receipt-" + o.ID}, nil
}

// docs/tracing.md: a span per call, a child span per attempt.
func ExampleNewTracer() {
	recorder := tracetest.NewSpanRecorder() // stands in for an exporter
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder)))
	ctx := context.Background()
	client := &paymentsClient{}
	order := Order{ID: "17"}

	payments := pipeline.New(
		pipeline.WithName("payments"),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3))),
		pipeline.WithTracer(otelevents.NewTracer(otel.GetTracerProvider())), // one Tracer may serve every pipeline
	)

	receipt, err := pipeline.Do(ctx, payments, func(ctx context.Context) (Receipt, error) {
		return client.Charge(ctx, order) // ctx carries the attempt's span: the client's spans are its children
	})
	fmt.Println(receipt.ID, err)

	for _, s := range recorder.Ended() {
		line := s.Name()
		for _, key := range []attribute.Key{"resilience.attempt", "resilience.retry_after_ms", "resilience.attempts", "resilience.outcome"} {
			for _, kv := range s.Attributes() {
				if kv.Key == key {
					line += fmt.Sprintf(" %s=%s", kv.Key, kv.Value.Emit())
				}
			}
		}
		fmt.Println(line, s.Status().Code)
	}
	// Output:
	// receipt-17 <nil>
	// resilience payments attempt resilience.attempt=1 resilience.outcome=transient Error
	// resilience payments attempt resilience.attempt=2 resilience.retry_after_ms=20 resilience.outcome=transient Error
	// resilience payments attempt resilience.attempt=3 resilience.retry_after_ms=20 resilience.outcome=success Unset
	// resilience payments resilience.attempts=3 resilience.outcome=success Unset
}

// Metrics for every call and attempt, with the duration of one call in
// about 64 on the histogram: the counters stay exact, and a call not
// sampled reads no clock and records nothing on the histogram.
func ExampleSampleDurations() {
	reader := sdkmetric.NewManualReader() // stands in for an exporter
	metrics, err := otelevents.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), otelevents.SampleDurations(64))
	if err != nil {
		panic(err)
	}
	p := pipeline.New(pipeline.WithName("payments"), pipeline.WithListener(metrics), pipeline.WithRetry(retrypolicy.New()))
	for range 1000 {
		_, _ = pipeline.Do(context.Background(), p, func(context.Context) (int, error) { return 1, nil })
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		panic(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		switch d := m.Data.(type) {
		case metricdata.Sum[int64]:
			fmt.Println(m.Name, d.DataPoints[0].Value)
		case metricdata.Histogram[float64]:
			n := d.DataPoints[0].Count
			fmt.Println(m.Name, "a sample:", n > 0 && n < 100)
		}
	}
	// Unordered output:
	// resilience.calls 1000
	// resilience.attempts 1000
	// resilience.call.duration a sample: true
}
