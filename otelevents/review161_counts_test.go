package otelevents_test

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/otelevents"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/registry"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

func review161Sums(t *testing.T, rd *sdkmetric.ManualReader) map[string]map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := rd.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			s, ok := m.Data.(metricdata.Sum[int64])
			if !ok {
				continue
			}
			for _, dp := range s.DataPoints {
				o, _ := dp.Attributes.Value(attribute.Key("outcome"))
				r, _ := dp.Attributes.Value(attribute.Key("reason"))
				k := o.AsString() + r.AsString()
				if out[m.Name] == nil {
					out[m.Name] = map[string]int64{}
				}
				out[m.Name][k] += dp.Value
			}
		}
	}
	return out
}

// Under many goroutines, through one pipeline with both a registry's and
// an otelevents Listener: every count matches what the calls did, exactly.
func TestReview161_CountsExactBothListeners(t *testing.T) {
	rd := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(rd))
	l, err := otelevents.New(mp)
	if err != nil {
		t.Fatal(err)
	}
	reg := registry.New()
	p0 := pipeline.New(pipeline.WithName("dep161"), pipeline.WithListener(l),
		pipeline.WithBreaker(breaker.New("dep161", breaker.ConsecutiveFailures(1<<31))),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(0))))
	p, err := reg.AddPipeline(p0)
	if err != nil {
		t.Fatal(err)
	}
	var invocations, calls atomic.Int64
	var byClass [8]atomic.Int64
	const G, N = 8, 400
	var wg sync.WaitGroup
	for g := range G {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range N {
				kind := (g*N + i) % 5
				var n int
				_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
					invocations.Add(1)
					n++
					switch kind {
					case 0:
						return 1, nil
					case 1: // transient then success
						if n == 1 {
							return 0, errors.New("blip")
						}
						return 1, nil
					case 2: // always transient
						return 0, errors.New("down")
					case 3:
						return 0, resilience.Permanent(errors.New("400"))
					default:
						return 0, resilience.Terminal(errors.New("500"))
					}
				})
				calls.Add(1)
				byClass[resilience.Classify(err)].Add(1)
			}
		}()
	}
	wg.Wait()
	sums := review161Sums(t, rd)
	var otelCalls, otelAttempts int64
	for _, v := range sums["resilience.calls"] {
		otelCalls += v
	}
	for _, v := range sums["resilience.attempts"] {
		otelAttempts += v
	}
	if otelCalls != calls.Load() {
		t.Errorf("otel calls %d, want %d", otelCalls, calls.Load())
	}
	if otelAttempts != invocations.Load() {
		t.Errorf("otel attempts %d, want %d", otelAttempts, invocations.Load())
	}
	for c := range byClass {
		if w := byClass[c].Load(); sums["resilience.calls"][resilience.Class(c).String()] != w {
			t.Errorf("otel calls %s: %d, want %d", resilience.Class(c), sums["resilience.calls"][resilience.Class(c).String()], w)
		}
	}
	if r := sums["resilience.retries"][""]; r != invocations.Load()-calls.Load() {
		t.Errorf("otel retries %d, want %d", r, invocations.Load()-calls.Load())
	}
	var ps registry.PipelineState
	for _, x := range reg.Snapshot().Pipelines {
		if x.Name == "dep161" {
			ps = x
		}
	}
	if ps.Calls != uint64(calls.Load()) || ps.Attempts != uint64(invocations.Load()) ||
		ps.Retries != uint64(invocations.Load()-calls.Load()) ||
		ps.Successes != uint64(byClass[resilience.ClassSuccess].Load()) ||
		ps.Failures != uint64(calls.Load()-byClass[resilience.ClassSuccess].Load()) {
		t.Errorf("registry %+v; calls %d invocations %d successes %d", ps, calls.Load(), invocations.Load(), byClass[0].Load())
	}
}

// "Recording an event allocates nothing": a successful call through a
// pipeline with the Listener (and the registry's) allocates no more than
// one without, with a real SDK meter provider.
func TestReview161_NoAllocPerCall(t *testing.T) {
	rd := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(rd))
	l, err := otelevents.New(mp, otelevents.SampleDurations(1<<20))
	if err != nil {
		t.Fatal(err)
	}
	base := pipeline.New(pipeline.WithName("alloc161"), pipeline.WithRetry(retrypolicy.New()))
	reg := registry.New()
	withL := base.With(pipeline.WithListener(l))
	registered, err := reg.AddPipeline(withL)
	if err != nil {
		t.Fatal(err)
	}
	op := func(ctx context.Context) (int, error) { return 1, nil }
	failOnce := func() resilience.Operation[int] {
		n := 0
		return func(ctx context.Context) (int, error) {
			n++
			if n == 1 {
				return 0, resilience.Permanent(errAlloc161)
			}
			return 1, nil
		}
	}
	ctx := context.Background()
	measure := func(p *pipeline.Pipeline, mk func() resilience.Operation[int]) float64 {
		runtime.GC()
		return testing.AllocsPerRun(500, func() { pipeline.Do(ctx, p, mk()) })
	}
	mkOK := func() resilience.Operation[int] { return op }
	a0, a1 := measure(base, mkOK), measure(registered, mkOK)
	if a1 > a0 {
		t.Errorf("success: %v allocs with listeners, %v without", a1, a0)
	}
	b0, b1 := measure(base, failOnce), measure(registered, failOnce)
	if b1 > b0 {
		t.Errorf("permanent error: %v allocs with listeners, %v without", b1, b0)
	}
	_ = time.Now
}

var errAlloc161 = errors.New("x")
