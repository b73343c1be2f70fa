package otelevents_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/otelevents"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/registry"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

type r2doneFilter struct {
	wantDone bool
	done     atomic.Int64
}

func (f *r2doneFilter) Wants(k resilience.EventKind) bool {
	return k == resilience.EventCallDone && f.wantDone
}
func (f *r2doneFilter) OnEvent(e resilience.Event) {
	if e.Kind == resilience.EventCallDone {
		f.done.Add(1)
	}
}

func r2collect(t *testing.T, rd *sdkmetric.ManualReader) (calls, attempts, rejections, hist int64) {
	var rm metricdata.ResourceMetrics
	if err := rd.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				var n int64
				for _, p := range d.DataPoints {
					n += p.Value
				}
				switch m.Name {
				case "resilience.calls":
					calls = n
				case "resilience.attempts":
					attempts = n
				case "resilience.rejections":
					rejections = n
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					hist += int64(p.Count)
				}
			}
		}
	}
	return
}

// With SampleDurations, in many pipelines and beside other listeners
// (the registry's, a filter, the breaker's), resilience.calls and
// resilience.attempts count every call and attempt once, the histogram
// only timed calls (all of them when another listener wants every call's
// end), and the registry every call once.
func TestReview2SampledCountsExact(t *testing.T) {
	for mask := range 1 << 6 {
		t.Run(fmt.Sprintf("%06b", mask), func(t *testing.T) {
			rd := sdkmetric.NewManualReader()
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(rd))
			l, err := otelevents.New(mp, otelevents.SampleDurations(4))
			if err != nil {
				t.Fatal(err)
			}
			name := fmt.Sprint("d", mask)
			opts := []pipeline.Option{pipeline.WithName(name), pipeline.WithListener(l)}
			var bopts []breaker.Option
			if mask&1 != 0 {
				bopts = append(bopts, breaker.WithListener(l))
			}
			if mask&2 != 0 || mask&1 != 0 {
				opts = append(opts, pipeline.WithBreaker(breaker.New(name, append(bopts, breaker.ConsecutiveFailures(1000))...)))
			}
			if mask&4 != 0 {
				opts = append(opts, pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(2), retrypolicy.BaseDelay(time.Microsecond))))
			}
			filter := &r2doneFilter{wantDone: mask&8 != 0}
			if mask&16 != 0 {
				opts = append(opts, pipeline.WithListener(filter))
			}
			if mask&32 != 0 {
				opts = append(opts, pipeline.WithTimeBudget(time.Minute))
			}
			p := pipeline.New(opts...)
			reg := registry.New()
			if mask&8 == 0 { // the registry on half of them
				if p, err = reg.AddPipeline(p); err != nil {
					t.Fatal(err)
				}
			}
			const calls = 400
			var attempts int64
			for i := range calls {
				_, _ = pipeline.Do(context.Background(), p, func(context.Context) (int, error) {
					attempts++
					if i%3 == 0 {
						return 0, errors.New("transient")
					}
					return 1, nil
				})
			}
			c, a, _, h := r2collect(t, rd)
			if c != calls {
				t.Errorf("resilience.calls %d, want %d", c, calls)
			}
			if a != attempts {
				t.Errorf("resilience.attempts %d, want %d", a, attempts)
			}
			allTimed := mask&16 != 0 && mask&8 != 0
			if allTimed && h != calls {
				t.Errorf("histogram %d, want every call (%d): another listener wants every call's end", h, calls)
			}
			if !allTimed && (h == 0 || h >= calls*2/3) {
				t.Errorf("histogram %d of %d calls: not a sample of about 1/4 (plus the registry's 1/64)", h, calls)
			}
			if mask&16 != 0 && filter.wantDone && filter.done.Load() != calls {
				t.Errorf("filter heard %d call ends", filter.done.Load())
			}
			for _, ps := range reg.Snapshot().Pipelines {
				if ps.Calls != calls {
					t.Errorf("registry calls %d", ps.Calls)
				}
			}
		})
	}
}

// A listener given to the breaker and to the pipeline counts each
// rejection once.
func TestReview2SampledRejectionsOnce(t *testing.T) {
	rd := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(rd))
	l, err := otelevents.New(mp, otelevents.SampleDurations(8))
	if err != nil {
		t.Fatal(err)
	}
	b := breaker.New("rej", breaker.WithListener(l))
	if err := b.SetMode(context.Background(), breaker.ForcedOpen, "test"); err != nil {
		t.Fatal(err)
	}
	reg := registry.New()
	p, err := reg.AddPipeline(pipeline.New(pipeline.WithBreaker(b), pipeline.WithListener(l), pipeline.WithRetry(retrypolicy.New())))
	if err != nil {
		t.Fatal(err)
	}
	const calls = 50
	for range calls {
		_, _ = pipeline.Do(context.Background(), p, func(context.Context) (int, error) { return 1, nil })
	}
	c, _, r, _ := r2collect(t, rd)
	if c != calls || r != calls {
		t.Errorf("calls %d rejections %d, want %d each", c, r, calls)
	}
}

// A call made with a context already done is a call: its end is not
// told, so resilience.calls and the registry miss it, while
// resilience.giveups counts its time_budget_exceeded (a give-up of a call
// that was never counted). Pre-existing (start returns before the
// listener is asked), but against "every counter counts every call
// exactly once".
func TestReview2CallWithDoneContextCounted(t *testing.T) {
	rd := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(rd))
	l, err := otelevents.New(mp, otelevents.SampleDurations(4))
	if err != nil {
		t.Fatal(err)
	}
	reg := registry.New()
	p, err := reg.AddPipeline(pipeline.New(pipeline.WithName("done-ctx"), pipeline.WithListener(l), pipeline.WithRetry(retrypolicy.New())))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	_, err = pipeline.Do(ctx, p, func(context.Context) (int, error) { return 1, nil })
	if err == nil {
		t.Fatal("no error")
	}
	c, _, _, _ := r2collect(t, rd)
	if c != 1 {
		t.Errorf("resilience.calls %d, want 1", c)
	}
	for _, ps := range reg.Snapshot().Pipelines {
		if ps.Calls != 1 {
			t.Errorf("registry calls %d, want 1", ps.Calls)
		}
	}
}
