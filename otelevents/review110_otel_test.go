package otelevents_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.uber.org/goleak"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/otelevents"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
)

func r110Points(t *testing.T, rd *sdkmetric.ManualReader) (gauge map[string]int64, calls map[string]int64, bounds []float64, unit string) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := rd.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	gauge, calls = map[string]int64{}, map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					v, _ := p.Attributes.Value("dependency")
					gauge[v.AsString()] = p.Value
				}
			case metricdata.Sum[int64]:
				if m.Name == "resilience.calls" {
					for _, p := range d.DataPoints {
						v, _ := p.Attributes.Value("dependency")
						calls[v.AsString()] += p.Value
					}
				}
			case metricdata.Histogram[float64]:
				unit = m.Unit
				for _, p := range d.DataPoints {
					bounds = p.Bounds
				}
			}
		}
	}
	return gauge, calls, bounds, unit
}

// New(nil) takes the global provider, also one set after New: counts,
// the state gauge and the histogram reach it.
func TestReview110GlobalProviderSetLater(t *testing.T) {
	prev := otel.GetMeterProvider()
	defer otel.SetMeterProvider(prev)
	l, err := otelevents.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	rd := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(rd))
	defer mp.Shutdown(context.Background())
	otel.SetMeterProvider(mp)

	b := breaker.New("g", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(time.Hour))
	p := pipeline.New(pipeline.WithBreaker(b), pipeline.WithListener(l))
	_, _ = pipeline.Do(context.Background(), p, func(context.Context) (int, error) { return 0, errors.New("x") })
	_, _ = pipeline.Do(context.Background(), p, func(context.Context) (int, error) { return 0, nil })
	gauge, calls, bounds, unit := r110Points(t, rd)
	if gauge["g"] != 2 {
		t.Errorf("state gauge through the global provider: %v, want g=2", gauge)
	}
	if calls["g"] != 2 {
		t.Errorf("calls through the global provider: %v", calls)
	}
	if unit != "s" || len(bounds) != 14 || bounds[0] != 0.005 || bounds[13] != 10 {
		t.Errorf("histogram unit %q bounds %v", unit, bounds)
	}
}

// The gauge follows SetMode: forced open reads 2, forced closed 0, back
// to normal the state underneath.
func TestReview110GaugeForcedModes(t *testing.T) {
	rd := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(rd))
	defer mp.Shutdown(context.Background())
	l, err := otelevents.New(mp)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	b := breaker.New("f", breaker.WithListener(l), breaker.OpenTimeout(time.Hour))
	steps := []struct {
		m    breaker.Mode
		want int64
	}{{breaker.ForcedOpen, 2}, {breaker.ForcedClosed, 0}, {breaker.ForcedOpen, 2}, {breaker.Normal, 0}, {breaker.Disabled, 0}}
	for _, s := range steps {
		if err := b.SetMode(ctx, s.m, "t"); err != nil {
			t.Fatal(err)
		}
		gauge, _, _, _ := r110Points(t, rd)
		if g, ok := gauge["f"]; !ok || g != s.want {
			t.Errorf("after SetMode(%v): gauge %v, want f=%d (state %v)", s.m, gauge, s.want, b.State())
		}
	}
}

// Many names, events and collections at once, under -race: the totals
// are exact once all is done, and nothing is left running.
func TestReview110ConcurrentCollect(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	rd := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(rd))
	l, err := otelevents.New(mp, otelevents.SampleDurations(3))
	if err != nil {
		t.Fatal(err)
	}
	const names, per = 200, 50
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var cw sync.WaitGroup
	for range 2 {
		cw.Add(1)
		go func() {
			defer cw.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				var rm metricdata.ResourceMetrics
				if err := rd.Collect(context.Background(), &rm); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range names * per / 8 {
				name := fmt.Sprintf("dep%d", (i*8+g)%names)
				l.OnEvent(resilience.Event{Kind: resilience.EventCallDone, Name: name, Duration: time.Millisecond, Untimed: i%2 == 0})
				l.OnEvent(resilience.Event{Kind: resilience.EventStateChange, Name: name, From: resilience.StateClosed, To: resilience.StateOpen})
			}
		}()
	}
	wg.Wait()
	close(stop)
	cw.Wait()
	gauge, calls, _, _ := r110Points(t, rd)
	if len(gauge) != names || len(calls) != names {
		t.Fatalf("names: gauge %d, calls %d, want %d", len(gauge), len(calls), names)
	}
	for n, v := range calls {
		if v != per || gauge[n] != 2 {
			t.Errorf("%s: calls %d gauge %d", n, v, gauge[n])
		}
	}
	if err := mp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	var nl *otelevents.Listener
	nl.OnEvent(resilience.Event{Kind: resilience.EventCallDone})
	if nl.Wants(resilience.EventCallDone) || nl.TimeCall() {
		t.Error("nil Listener wants")
	}
	p := pipeline.New(pipeline.WithListener(nl), pipeline.WithBreaker(breaker.New("n")))
	if _, err := pipeline.Do(context.Background(), p, func(context.Context) (int, error) { return 1, nil }); err != nil {
		t.Error(err)
	}
}
