package otelevents_test

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/resiliencekit/resiliencekit/otelevents"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// BenchmarkTracer is a successful call through a pipeline with a retry
// stage: without a tracer (the baseline), with one whose calls are all
// sampled out, and with one recording every span (to a processor that
// drops them).
func BenchmarkTracer(b *testing.B) {
	op := func(context.Context) (int, error) { return 1, nil }
	for _, bc := range []struct {
		name   string
		tracer *otelevents.Tracer
	}{
		{"none", nil},
		{"sampled-out", otelevents.NewTracer(sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample())))},
		{"recorded", otelevents.NewTracer(sdktrace.NewTracerProvider())},
	} {
		b.Run(bc.name, func(b *testing.B) {
			opts := []pipeline.Option{pipeline.WithRetry(retrypolicy.New()), pipeline.WithName("stock")}
			if bc.tracer != nil {
				opts = append(opts, pipeline.WithTracer(bc.tracer))
			}
			p := pipeline.New(opts...)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				_, _ = pipeline.Do(ctx, p, op)
			}
		})
	}
}
