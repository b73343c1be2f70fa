package otelevents_test

import (
	"context"
	"errors"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/resiliencekit/resiliencekit/resilience"
)

// "Recording an event allocates nothing."
func TestReview109RecordAllocs(t *testing.T) {
	l, _ := r109New(t)
	fail := errors.New("x")
	evs := []resilience.Event{
		{Kind: resilience.EventCallDone, Name: "a", Duration: 1e6},
		{Kind: resilience.EventCallDone, Name: "a", Duration: 1e6, Err: fail},
		{Kind: resilience.EventCallDone, Name: "a", Untimed: true},
		{Kind: resilience.EventAttempt, Name: "a", Err: fail},
		{Kind: resilience.EventRetry, Name: "a"},
		{Kind: resilience.EventRejected, Name: "a"},
		{Kind: resilience.EventStateChange, Name: "a", To: resilience.StateOpen},
		{Kind: resilience.EventRetriesExhausted, Name: "a"},
		{Kind: resilience.EventAttempt, Name: "b"}, // alternating names
		{Kind: resilience.EventAttempt, Name: "a"},
	}
	for _, e := range evs {
		l.OnEvent(e)
	}
	for _, e := range evs {
		if n := testing.AllocsPerRun(200, func() { l.OnEvent(e) }); n != 0 {
			t.Errorf("%v of %q: %v allocs", e.Kind, e.Name, n)
		}
	}
}

// resilience.breaker.state: "a breaker's state: 0 closed, 1 half-open, 2
// open". A breaker that opened and closed again under a delta-temporality
// reader (OTLP to, say, Datadog or Dynatrace) still has a state in the
// next export.
func TestReview109StateGaugeDelta(t *testing.T) {
	rd := sdkmetric.NewManualReader(sdkmetric.WithTemporalitySelector(func(sdkmetric.InstrumentKind) metricdata.Temporality { return metricdata.DeltaTemporality }))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(rd))
	defer mp.Shutdown(context.Background())
	l := r109Must(t, mp)
	l.OnEvent(resilience.Event{Kind: resilience.EventStateChange, Name: "a", From: resilience.StateClosed, To: resilience.StateOpen})
	first := r109Sums(t, rd)["resilience.breaker.state"]
	second := r109Sums(t, rd)["resilience.breaker.state"]
	t.Logf("first export %v, second %v", first, second)
	if v, ok := second["a|"]; !ok || v != 2 {
		t.Errorf("second export after the breaker opened: state %v (ok %v), want 2 (it is still open)", v, ok)
	}
}
