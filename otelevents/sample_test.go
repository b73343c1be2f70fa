package otelevents_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/otelevents"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/registry"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// counts returns the calls counted by outcome and the durations recorded
// (the histogram's count) by outcome.
func counts(t *testing.T, r *sdkmetric.ManualReader) (calls, attempts, durations map[string]int64) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, r.Collect(context.Background(), &rm))
	calls, attempts, durations = map[string]int64{}, map[string]int64{}, map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch m.Name {
			case "resilience.calls", "resilience.attempts":
				into := calls
				if m.Name == "resilience.attempts" {
					into = attempts
				}
				for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
					o, _ := p.Attributes.Value("outcome")
					into[o.AsString()] = p.Value
				}
			case "resilience.call.duration":
				for _, p := range m.Data.(metricdata.Histogram[float64]).DataPoints {
					o, _ := p.Attributes.Value("outcome")
					durations[o.AsString()] = int64(p.Count)
				}
			}
		}
	}
	return calls, attempts, durations
}

// run makes n calls through a pipeline with l, one in every fail failing
// for good.
func run(t *testing.T, l resilience.Listener, n, fail int) {
	t.Helper()
	p := pipeline.New(pipeline.WithName("stock"), pipeline.WithListener(l),
		pipeline.WithBreaker(breaker.New("stock", breaker.ConsecutiveFailures(1<<30))), pipeline.WithRetry(retrypolicy.New()))
	bad := resilience.Permanent(errors.New("400"))
	for i := range n {
		_, _ = pipeline.Do(context.Background(), p, func(context.Context) (int, error) {
			if i%fail == 0 {
				return 0, bad
			}
			return 1, nil
		})
	}
}

func TestEveryCallIsTimedByDefault(t *testing.T) {
	for _, opts := range [][]otelevents.Option{nil, {otelevents.SampleDurations(1)}, {otelevents.SampleDurations(-5)}, {nil},
		{otelevents.SampleDurations(10), otelevents.SampleDurations(1)}} { // the last one given counts
		reader := sdkmetric.NewManualReader()
		l, err := otelevents.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), opts...)
		require.NoError(t, err)
		run(t, l, 1000, 10)
		calls, attempts, durations := counts(t, reader)
		assert.Equal(t, map[string]int64{"success": 900, "permanent": 100}, calls)
		assert.Equal(t, calls, attempts)
		assert.Equal(t, calls, durations, "every call's duration")
	}
}

// With SampleDurations, every call and attempt is still counted, and about
// one call in n is timed, of each outcome alike.
func TestSampledDurationsLeaveTheCountsExact(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	l, err := otelevents.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), otelevents.SampleDurations(10))
	require.NoError(t, err)
	const n = 20000
	run(t, l, n, 4)
	calls, attempts, durations := counts(t, reader)
	assert.Equal(t, map[string]int64{"success": n * 3 / 4, "permanent": n / 4}, calls)
	assert.Equal(t, calls, attempts)
	// Binomial: 1500 ± 37 successes and 500 ± 21 failures timed; the
	// bounds are over 6 standard deviations wide.
	assert.InDelta(t, n*3/4/10, durations["success"], 250)
	assert.InDelta(t, n/4/10, durations["permanent"], 130)
}

// The end of a call not timed is counted, and not recorded.
func TestAnUntimedCallIsCountedNotRecorded(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	l, err := otelevents.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	require.NoError(t, err)
	l.OnEvent(resilience.Event{Kind: resilience.EventCallDone, Name: "stock", Untimed: true})
	l.OnEvent(resilience.Event{Kind: resilience.EventCallDone, Name: "stock", Duration: time.Second})
	calls, _, durations := counts(t, reader)
	assert.Equal(t, map[string]int64{"success": 2}, calls)
	assert.Equal(t, map[string]int64{"success": 1}, durations)
	assert.Zero(t, testing.AllocsPerRun(100, func() {
		l.OnEvent(resilience.Event{Kind: resilience.EventCallDone, Name: "stock", Untimed: true})
	}))
}

// TimeCall says yes to every call by default, to about one in n with
// SampleDurations(n).
func TestTimeCallSamples(t *testing.T) {
	l, err := otelevents.New(sdkmetric.NewMeterProvider())
	require.NoError(t, err)
	var _ resilience.CallTimer = l
	for range 1000 {
		require.True(t, l.TimeCall())
	}
	l, err = otelevents.New(sdkmetric.NewMeterProvider(), otelevents.SampleDurations(64))
	require.NoError(t, err)
	yes := 0
	for range 64000 {
		if l.TimeCall() {
			yes++
		}
	}
	assert.InDelta(t, 1000, yes, 200) // sd 31
}

// Beside the registry's listener, which times about one call in 64 for
// its quantiles: a Listener that would time none still counts every call,
// and records the durations of the calls the registry had timed.
func TestSampledBesideARegistry(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	l, err := otelevents.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), otelevents.SampleDurations(math.MaxInt))
	require.NoError(t, err)
	p, err := registry.New().AddPipeline(pipeline.New(pipeline.WithName("stock"), pipeline.WithListener(l),
		pipeline.WithRetry(retrypolicy.New())))
	require.NoError(t, err)
	for range 6400 {
		_, err := pipeline.Do(context.Background(), p, func(context.Context) (int, error) { return 1, nil })
		require.NoError(t, err)
	}
	calls, attempts, durations := counts(t, reader)
	assert.Equal(t, map[string]int64{"success": 6400}, calls)
	assert.Equal(t, calls, attempts)
	assert.InDelta(t, 100, durations["success"], 60, "the registry's sample") // about 6400/64
}
