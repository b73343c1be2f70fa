package otelevents_test

import (
	"context"
	"sort"
	"strings"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/resiliencekit/resiliencekit/otelevents"
)

func r109New(t *testing.T, opts ...otelevents.Option) (*otelevents.Listener, *sdkmetric.ManualReader) {
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

func r109Collect(t *testing.T, rd *sdkmetric.ManualReader) metricdata.ResourceMetrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := rd.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	return rm
}

// r109Sums: metric name -> "dep|outcome-or-reason" -> value (histogram:
// count), as r61Sums reads them.
func r109Sums(t *testing.T, rd *sdkmetric.ManualReader) map[string]map[string]int64 {
	t.Helper()
	return r61Sums(t, rd)
}

func r109Total(m map[string]int64) int64 { return r61Total(m) }

func r109Fmt(s map[string]map[string]int64) string {
	var b strings.Builder
	var names []string
	for n := range s {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		b.WriteString(n)
		b.WriteString("=")
		var ks []string
		for k := range s[n] {
			ks = append(ks, k)
		}
		sort.Strings(ks)
		for _, k := range ks {
			b.WriteString(" " + k + ":")
			b.WriteString(itoa(s[n][k]))
		}
		b.WriteString("; ")
	}
	return b.String()
}

func itoa(v int64) string {
	if v == 0 {
		return "0"
	}
	neg := v < 0
	if neg {
		v = -v
	}
	var buf [20]byte
	i := len(buf)
	for v > 0 {
		i--
		buf[i] = byte('0' + v%10)
		v /= 10
	}
	if neg {
		i--
		buf[i] = '-'
	}
	return string(buf[i:])
}

func r109Must(t *testing.T, mp *sdkmetric.MeterProvider) *otelevents.Listener {
	t.Helper()
	l, err := otelevents.New(mp)
	if err != nil {
		t.Fatal(err)
	}
	return l
}
