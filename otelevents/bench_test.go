package otelevents_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/otelevents"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
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

// BenchmarkListener is a successful call through a pipeline with a breaker
// and a retry stage: without a listener (the baseline), with the metrics
// Listener recording to an SDK meter provider, and with it recording to
// OpenTelemetry's no-op provider (the Listener's own share: timing the
// call, counting it and its attempt; the rest of the SDK row is the SDK's
// histogram taking the call's duration); then both with the durations of
// one call in about 64 recorded (SampleDurations(64)), the counts exact:
//
//	cd benchmarks && go run ./ratios -pkg ../otelevents -bench Listener -baseline none -cpu 1
func BenchmarkListener(b *testing.B) {
	l, err := otelevents.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader())))
	if err != nil {
		b.Fatal(err)
	}
	own, err := otelevents.New(noop.NewMeterProvider())
	if err != nil {
		b.Fatal(err)
	}
	sampled, err := otelevents.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader())),
		otelevents.SampleDurations(64))
	if err != nil {
		b.Fatal(err)
	}
	ownSampled, err := otelevents.New(noop.NewMeterProvider(), otelevents.SampleDurations(64))
	if err != nil {
		b.Fatal(err)
	}
	op := func(context.Context) (int, error) { return 1, nil }
	for _, bc := range []struct {
		name string
		opts []pipeline.Option
	}{
		{"none", nil},
		{"metrics", []pipeline.Option{pipeline.WithListener(l)}},
		{"noopprovider", []pipeline.Option{pipeline.WithListener(own)}},
		{"metricsSampled", []pipeline.Option{pipeline.WithListener(sampled)}},
		{"noopproviderSampled", []pipeline.Option{pipeline.WithListener(ownSampled)}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			p := pipeline.New(append(bc.opts, pipeline.WithBreaker(breaker.New("stock")), pipeline.WithRetry(retrypolicy.New()))...)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				_, _ = pipeline.Do(ctx, p, op)
			}
		})
	}
}

// BenchmarkListenerParts is what BenchmarkListener's rows are made of,
// each alone: the two clock reads that time a call; the SDK histogram's
// Record of a duration, with an attribute set made once, as the Listener
// records it; the Listener's own work for the end of a call, timed (on the
// SDK and on the no-op provider) and untimed; for an attempt; and
// SampleDurations' draw. What the pipeline does to ask the Listener and
// hand it events is in internal/safe's BenchmarkListener.
func BenchmarkListenerParts(b *testing.B) {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	origin := time.Now()
	var d time.Duration
	b.Run("clock", func(b *testing.B) {
		for b.Loop() {
			start := time.Since(origin)
			d += time.Since(origin) - start
		}
	})
	h, err := mp.Meter("parts").Float64Histogram("duration")
	if err != nil {
		b.Fatal(err)
	}
	set := []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(attribute.String("dependency", "stock"),
		attribute.String("outcome", "success")))}
	b.Run("sdkRecord", func(b *testing.B) {
		for b.Loop() {
			h.Record(context.Background(), 1e-6, set...)
		}
	})
	sdk, err := otelevents.New(mp)
	if err != nil {
		b.Fatal(err)
	}
	own, err := otelevents.New(noop.NewMeterProvider(), otelevents.SampleDurations(64))
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		l    *otelevents.Listener
		e    resilience.Event
	}{
		{"callDone", sdk, resilience.Event{Kind: resilience.EventCallDone, Name: "stock", Duration: time.Microsecond}},
		{"callDoneNoop", own, resilience.Event{Kind: resilience.EventCallDone, Name: "stock", Duration: time.Microsecond}},
		{"callDoneUntimed", own, resilience.Event{Kind: resilience.EventCallDone, Name: "stock", Untimed: true}},
		{"attempt", own, resilience.Event{Kind: resilience.EventAttempt, Name: "stock", Attempt: 1}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				bc.l.OnEvent(bc.e)
			}
		})
	}
	b.Run("timeCall", func(b *testing.B) {
		for b.Loop() {
			own.TimeCall()
		}
	})
	_ = d
}
