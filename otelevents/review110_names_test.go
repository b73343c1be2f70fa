package otelevents_test

import (
	"context"
	"errors"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/otelevents"
	"github.com/resiliencekit/resiliencekit/pipeline"
)

// A pipeline named apart from its breaker: the state gauge is under the
// breaker's name, the calls under the pipeline's (the package doc: name
// them alike to put them side by side; a breaker shared by pipelines of
// other names is one breaker).
func TestReview110GaugeDependencyName(t *testing.T) {
	rd := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(rd))
	defer mp.Shutdown(context.Background())
	l, err := otelevents.New(mp)
	if err != nil {
		t.Fatal(err)
	}
	b := breaker.New("payments-cb", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(time.Hour))
	p := pipeline.New(pipeline.WithName("payments"), pipeline.WithBreaker(b), pipeline.WithListener(l))
	_, _ = pipeline.Do(context.Background(), p, func(context.Context) (int, error) { return 0, errors.New("x") })
	_, _ = pipeline.Do(context.Background(), p, func(context.Context) (int, error) { return 0, nil })
	gauge, calls, _, _ := r110Points(t, rd)
	t.Logf("gauge %v calls %v", gauge, calls)
	if _, ok := gauge["payments-cb"]; !ok || len(gauge) != 1 {
		t.Errorf("the state gauge is not under the breaker's name alone: gauge %v, calls %v", gauge, calls)
	}
}
