package otelevents_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/otelevents"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// sums returns each instrument's data points as "attr=value,..." -> value.
func collect(t *testing.T, r *sdkmetric.ManualReader) map[string]map[string]float64 {
	var rm metricdata.ResourceMetrics
	require.NoError(t, r.Collect(context.Background(), &rm))
	out := map[string]map[string]float64{}
	key := func(s attribute.Set) string {
		k := ""
		for _, kv := range s.ToSlice() {
			if kv.Key != "dependency" {
				k += string(kv.Key) + "=" + kv.Value.Emit()
			}
		}
		return k
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			pts := map[string]float64{}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					pts[key(p.Attributes)] = float64(p.Value)
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					pts[key(p.Attributes)] = float64(p.Value)
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					pts[key(p.Attributes)] = p.Sum
				}
			}
			out[m.Name] = pts
		}
	}
	return out
}

func TestMetrics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reader := sdkmetric.NewManualReader()
		l, err := otelevents.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
		require.NoError(t, err)

		b := breaker.New("stock", breaker.ConsecutiveFailures(1), breaker.WithListener(l))
		p := pipeline.New(pipeline.WithBreaker(b), pipeline.WithListener(l),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.Jitter(retrypolicy.None), retrypolicy.MaxAttempts(2))))
		errDown := errors.New("down")
		_, _ = pipeline.Do(t.Context(), p, func(context.Context) (int, error) { return 0, errDown })
		_, _ = pipeline.Do(t.Context(), p, func(context.Context) (int, error) { return 0, errDown })
		time.Sleep(time.Minute)
		_, _ = pipeline.Do(t.Context(), p, func(context.Context) (int, error) { return 1, nil })

		got := collect(t, reader)
		assert.Equal(t, map[string]float64{"outcome=transient": 1, "outcome=terminal": 1, "outcome=success": 1}, got["resilience.calls"])
		assert.Equal(t, map[string]float64{"outcome=transient": 2, "outcome=success": 1}, got["resilience.attempts"])
		assert.Equal(t, map[string]float64{"": 1}, got["resilience.retries"])
		assert.Equal(t, map[string]float64{"reason=retries_exhausted": 1}, got["resilience.giveups"])
		assert.Equal(t, map[string]float64{"": 1}, got["resilience.rejections"])
		assert.Equal(t, map[string]float64{"": 0}, got["resilience.breaker.state"], "closed again")
		assert.InDelta(t, 0.1, got["resilience.call.duration"]["outcome=transient"], 1e-9)
	})
}

// TestListenerAllocatesNothing: once a dependency is known, recording any
// event it takes allocates nothing, and it declines the events it does
// not record.
func TestListenerAllocatesNothing(t *testing.T) {
	l, err := otelevents.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader())))
	require.NoError(t, err)
	errDown := errors.New("down")
	for _, e := range []resilience.Event{
		{Kind: resilience.EventCallDone, Name: "stock", Duration: time.Millisecond},
		{Kind: resilience.EventCallDone, Name: "stock", Err: errDown},
		{Kind: resilience.EventAttempt, Name: "stock", Err: errDown},
		{Kind: resilience.EventRetry, Name: "stock"},
		{Kind: resilience.EventRejected, Name: "stock"},
		{Kind: resilience.EventQuotaExhausted, Name: "stock"},
		{Kind: resilience.EventStateChange, Name: "stock", To: resilience.StateOpen},
	} {
		l.OnEvent(e)
		assert.Zero(t, testing.AllocsPerRun(100, func() { l.OnEvent(e) }), "%v", e.Kind)
	}
	assert.True(t, l.Wants(resilience.EventCallDone))
	assert.False(t, l.Wants(resilience.EventHedged), "an event it does not record is not built for it")
}

// TestListenerKeepsEveryDependency: events of many dependencies at once,
// from many goroutines, are all counted, each under its own name.
func TestListenerKeepsEveryDependency(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	l, err := otelevents.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	require.NoError(t, err)
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			for range 100 {
				l.OnEvent(resilience.Event{Kind: resilience.EventRetry, Name: fmt.Sprint("dep", i)})
			}
		})
	}
	wg.Wait()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == "resilience.retries" {
				for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
					name, _ := p.Attributes.Value("dependency")
					got[name.AsString()] = p.Value
				}
			}
		}
	}
	require.Len(t, got, 50)
	for name, n := range got {
		assert.EqualValues(t, 100, n, name)
	}
}
