package otelevents_test

import (
	"context"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/resiliencekit/resiliencekit/otelevents"
)

// r61Reader is a listener on a ManualReader.
func r61New(t *testing.T, opts ...otelevents.Option) (*otelevents.Listener, *sdkmetric.ManualReader) {
	t.Helper()
	rd := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(rd))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	l, err := otelevents.New(mp, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l, rd
}

// r61Sums returns, for metric name, the value per "dep|attr" where attr is
// the value of the outcome/reason attribute ("" if none).
func r61Sums(t *testing.T, rd *sdkmetric.ManualReader) map[string]map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := rd.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			mm := map[string]int64{}
			out[m.Name] = mm
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					dep, _ := p.Attributes.Value("dependency")
					o, ok := p.Attributes.Value("outcome")
					if !ok {
						o, _ = p.Attributes.Value("reason")
					}
					mm[dep.AsString()+"|"+o.AsString()] += p.Value
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					dep, _ := p.Attributes.Value("dependency")
					o, _ := p.Attributes.Value("outcome")
					mm[dep.AsString()+"|"+o.AsString()] += int64(p.Count)
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					dep, _ := p.Attributes.Value("dependency")
					mm[dep.AsString()+"|"] = p.Value
				}
			}
		}
	}
	return out
}

func r61Total(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}
