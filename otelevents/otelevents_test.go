package otelevents_test

import (
	"context"
	"errors"
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
