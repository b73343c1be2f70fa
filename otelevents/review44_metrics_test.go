package otelevents_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/resiliencekit/resiliencekit/otelevents"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// r44Collect returns, for each instrument, the value of each data point keyed
// by its attributes ("dependency=x,outcome=y"), and histogram counts.
func r44Collect(t testing.TB, r *sdkmetric.ManualReader) (sums map[string]map[string]int64, hist map[string]uint64, gauges map[string]int64) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	sums = map[string]map[string]int64{}
	hist = map[string]uint64{}
	gauges = map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				if sums[m.Name] == nil {
					sums[m.Name] = map[string]int64{}
				}
				for _, p := range d.DataPoints {
					sums[m.Name][p.Attributes.Encoded(r44Enc)] += p.Value
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					hist[p.Attributes.Encoded(r44Enc)] += p.Count
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					gauges[p.Attributes.Encoded(r44Enc)] = p.Value
				}
			}
		}
	}
	return sums, hist, gauges
}

var r44Enc = attribute.DefaultEncoder()

func r44Total(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

func r44Listener(t testing.TB, opts ...otelevents.Option) (*otelevents.Listener, *sdkmetric.ManualReader) {
	t.Helper()
	r := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	l, err := otelevents.New(mp, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l, r
}

// Many goroutines, many dependencies created concurrently, a reader
// collecting all the while: every count exact at the end, and every
// collected value never decreasing in between.
func TestReview44_CountsExactUnderConcurrency(t *testing.T) {
	l, r := r44Listener(t, otelevents.SampleDurations(3))
	const workers, per, names = 64, 2000, 97
	errT := errors.New("boom")
	errP := resilience.Permanent(errors.New("400"))
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var readerErr atomic.Value
	var collects atomic.Int64
	go func() { // reader collecting while events flow
		prev := map[string]int64{}
		for {
			select {
			case <-stop:
				return
			default:
			}
			sums, _, _ := r44Collect(t, r)
			collects.Add(1)
			for inst, pts := range sums {
				for k, v := range pts {
					if v < prev[inst+"|"+k] {
						readerErr.Store(fmt.Sprintf("%s %s went down %d -> %d", inst, k, prev[inst+"|"+k], v))
					}
					prev[inst+"|"+k] = v
				}
			}
		}
	}()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				name := fmt.Sprintf("dep-%d", (w*7+i)%names) // names first seen concurrently
				var err error
				switch i % 3 {
				case 1:
					err = errT
				case 2:
					err = errP
				}
				l.OnEvent(resilience.Event{Kind: resilience.EventAttempt, Name: name, Err: err})
				l.OnEvent(resilience.Event{Kind: resilience.EventCallDone, Name: name, Err: err, Untimed: i%2 == 0, Duration: time.Millisecond})
				l.OnEvent(resilience.Event{Kind: resilience.EventRetry, Name: name})
				l.OnEvent(resilience.Event{Kind: resilience.EventRejected, Name: name})
				l.OnEvent(resilience.Event{Kind: resilience.EventRetriesExhausted, Name: name})
				l.OnEvent(resilience.Event{Kind: resilience.EventNotRetried, Name: name})
				l.OnEvent(resilience.Event{Kind: resilience.EventHedged, Name: name}) // not recorded
			}
		}()
	}
	wg.Wait()
	close(stop)
	if v := readerErr.Load(); v != nil {
		t.Error(v)
	}
	sums, hist, _ := r44Collect(t, r)
	const total = workers * per
	for _, inst := range []string{"resilience.calls", "resilience.attempts", "resilience.retries", "resilience.rejections"} {
		if got := r44Total(sums[inst]); got != total {
			t.Errorf("%s = %d, want %d", inst, got, total)
		}
	}
	if got := r44Total(sums["resilience.giveups"]); got != 2*total {
		t.Errorf("giveups = %d, want %d", got, 2*total)
	}
	deps := map[string]bool{}
	for k := range sums["resilience.retries"] {
		deps[k] = true
	}
	if len(deps) != names {
		t.Errorf("%d dependencies, want %d", len(deps), names)
	}
	var h uint64
	for _, v := range hist {
		h += v
	}
	if h != total/2 {
		t.Errorf("histogram count %d, want %d (the timed calls)", h, total/2)
	}
	t.Logf("collections during the run: %d", collects.Load())
}

// Through real pipelines, with a listener shared by pipelines of many names
// built and called concurrently: calls and attempts exact.
func TestReview44_PipelineCountsExact(t *testing.T) {
	l, r := r44Listener(t)
	const pipes, callsPer = 40, 300
	var wg sync.WaitGroup
	var wantCalls, wantAttempts atomic.Int64
	for i := range pipes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := pipeline.New(pipeline.WithName(fmt.Sprintf("p%d", i)), pipeline.WithListener(l),
				pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(0))))
			for j := range callsPer {
				n := 0
				_, _ = pipeline.Do(context.Background(), p, func(context.Context) (int, error) {
					n++
					if n <= j%3 {
						return 0, errors.New("transient")
					}
					return 1, nil
				})
				wantCalls.Add(1)
				wantAttempts.Add(int64(n))
			}
		}()
	}
	wg.Wait()
	sums, hist, _ := r44Collect(t, r)
	if got := r44Total(sums["resilience.calls"]); got != wantCalls.Load() {
		t.Errorf("calls %d, want %d", got, wantCalls.Load())
	}
	if got := r44Total(sums["resilience.attempts"]); got != wantAttempts.Load() {
		t.Errorf("attempts %d, want %d", got, wantAttempts.Load())
	}
	var h uint64
	for _, v := range hist {
		h += v
	}
	if int64(h) != wantCalls.Load() {
		t.Errorf("durations %d, want every call %d", h, wantCalls.Load())
	}
}

// "Recording an event allocates nothing": every kind, every class, after
// the dependency exists, and alternating dependencies.
func TestReview44_RecordingAllocatesNothing(t *testing.T) {
	l, r := r44Listener(t)
	errT := errors.New("t")
	errR := resilience.Rejected(errors.New("r"))
	custom := &r44ClassErr{c: resilience.Class(42)}
	events := []resilience.Event{
		{Kind: resilience.EventCallDone, Name: "a", Duration: time.Millisecond},
		{Kind: resilience.EventCallDone, Name: "b", Err: errT, Duration: time.Millisecond},
		{Kind: resilience.EventCallDone, Name: "a", Err: errR, Untimed: true},
		{Kind: resilience.EventCallDone, Name: "b", Err: custom, Duration: time.Second},
		{Kind: resilience.EventAttempt, Name: "a", Err: errT},
		{Kind: resilience.EventAttempt, Name: "b", Err: context.Canceled},
		{Kind: resilience.EventRetry, Name: "a"},
		{Kind: resilience.EventRejected, Name: "b"},
		{Kind: resilience.EventStateChange, Name: "a", To: resilience.StateOpen},
		{Kind: resilience.EventStateChange, Name: "b", To: resilience.StateHalfOpen},
		{Kind: resilience.EventQuotaExhausted, Name: "a"},
		{Kind: resilience.EventTimeBudgetExceeded, Name: "b"},
		{Kind: resilience.EventRetriesExhausted, Name: "a"},
		{Kind: resilience.EventNotRetried, Name: "b"},
	}
	for _, e := range events { // make the dependencies and data points
		l.OnEvent(e)
	}
	_, _, _ = r44Collect(t, r)
	for i, e := range events {
		if n := testing.AllocsPerRun(200, func() { l.OnEvent(e) }); n != 0 {
			t.Errorf("event %d (%v, %v) allocates %v", i, e.Kind, e.Err, n)
		}
	}
	if n := testing.AllocsPerRun(200, func() {
		for _, e := range events {
			l.OnEvent(e)
		}
	}); n != 0 {
		t.Errorf("alternating dependencies allocate %v a round", n)
	}
	// Once collected again (delta-less cumulative reader): still nothing.
	_, _, _ = r44Collect(t, r)
	if n := testing.AllocsPerRun(200, func() { l.OnEvent(events[0]) }); n != 0 {
		t.Errorf("after a collection: %v", n)
	}
}

type r44ClassErr struct{ c resilience.Class }

func (e *r44ClassErr) Error() string                     { return "classed" }
func (e *r44ClassErr) ResilienceClass() resilience.Class { return e.c }

// SampleDurations with extreme n: n <= 1 times every call; MaxInt almost
// none; counts stay exact whatever n.
func TestReview44_SampleDurationsExtreme(t *testing.T) {
	for _, n := range []int{math.MinInt, -1, 0, 1, 2, 3, 1000, math.MaxInt} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			l, r := r44Listener(t, otelevents.SampleDurations(n))
			const calls = 200000
			timed := 0
			for range calls {
				if l.TimeCall() {
					timed++
				}
			}
			want := float64(calls)
			if n > 1 {
				want = float64(calls) / float64(n)
			}
			sd := math.Sqrt(want*(1-want/calls)) + 1
			if math.Abs(float64(timed)-want) > 6*sd {
				t.Errorf("n=%d: %d of %d timed, want about %.1f", n, timed, calls, want)
			}
			p := pipeline.New(pipeline.WithName("s"), pipeline.WithListener(l))
			for range 1000 {
				_, _ = pipeline.Do(context.Background(), p, func(context.Context) (int, error) { return 1, nil })
			}
			sums, hist, _ := r44Collect(t, r)
			if got := r44Total(sums["resilience.calls"]); got != 1000 {
				t.Errorf("calls %d, want 1000", got)
			}
			var h uint64
			for _, v := range hist {
				h += v
			}
			if n <= 1 && h != 1000 {
				t.Errorf("n=%d: %d durations, want all 1000", n, h)
			}
			if n == math.MaxInt && h != 0 {
				t.Errorf("n=MaxInt: %d durations", h)
			}
		})
	}
}

// Options combined: the last SampleDurations wins, a nil option is ignored.
func TestReview44_SampleDurationsLastWins(t *testing.T) {
	l, _ := r44Listener(t, otelevents.SampleDurations(math.MaxInt), nil, otelevents.SampleDurations(0))
	for range 100 {
		if !l.TimeCall() {
			t.Fatal("SampleDurations(0) after MaxInt should time every call")
		}
	}
}

// Many distinct pipeline names: the cost of a new name does not grow with
// the names kept (it was quadratic: the map of dependencies was copied on
// every new name).
func TestReview44_ManyNamesGrowth(t *testing.T) {
	// Up to three tries, each on a Listener of its own: a quadratic cost
	// is over the bound in every one (about 19x), where a loaded machine's
	// pause lands in one at most.
	for try := 1; ; try++ {
		l, r := r44Listener(t)
		measure := func(from, to int) time.Duration {
			start := time.Now()
			for i := from; i < to; i++ {
				l.OnEvent(resilience.Event{Kind: resilience.EventRetry, Name: fmt.Sprintf("host-%d", i)})
			}
			return time.Since(start)
		}
		var ms0, ms1 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms0)
		first := measure(0, 2000)
		_ = measure(2000, 18000)
		last := measure(18000, 20000)
		runtime.GC()
		runtime.ReadMemStats(&ms1)
		t.Logf("try %d: first 2000 names: %v; names 18000-20000: %v (x%.1f); heap +%d KiB for 20000 names (%d B/name)",
			try, first, last, float64(last)/float64(first), (ms1.HeapAlloc-ms0.HeapAlloc)/1024, (ms1.HeapAlloc-ms0.HeapAlloc)/20000)
		start := time.Now()
		sums, _, _ := r44Collect(t, r)
		t.Logf("one collection: %v, %d points", time.Since(start), len(sums["resilience.retries"]))
		if last <= 5*first {
			return
		}
		if try == 3 {
			t.Errorf("a new name costs %.0fx more at 20000 names than at the first: quadratic", float64(last)/float64(first))
			return
		}
	}
}

// Counts kept for a name never seen again stay for ever: a pipeline per
// request host never lets go of them (cardinality has no cap, unlike the
// Tracer's 256).
func TestReview44_ManyNamesConcurrentCreation(t *testing.T) {
	l, r := r44Listener(t)
	const g, per = 32, 300
	var wg sync.WaitGroup
	start := time.Now()
	for w := range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				l.OnEvent(resilience.Event{Kind: resilience.EventCallDone, Name: fmt.Sprintf("n-%d-%d", w, i)})
			}
		}()
	}
	wg.Wait()
	t.Logf("%d names created by %d goroutines at once: %v", g*per, g, time.Since(start))
	sums, hist, _ := r44Collect(t, r)
	// The SDK caps an instrument's points (2000 by default, the rest in an
	// otel.metric.overflow point): the Listener still keeps every name.
	t.Logf("%d points, %d histogram points exported for %d names", len(sums["resilience.calls"]), len(hist), g*per)
	if got := r44Total(sums["resilience.calls"]); got != g*per {
		t.Errorf("%d calls, want %d", got, g*per)
	}
}

// The breaker state gauge: 0/1/2 per dependency; state changes racing.
func TestReview44_BreakerStateGauge(t *testing.T) {
	l, r := r44Listener(t)
	for _, c := range []struct {
		to   resilience.State
		want int64
	}{{resilience.StateOpen, 2}, {resilience.StateHalfOpen, 1}, {resilience.StateClosed, 0}, {resilience.State(9), 0}} {
		l.OnEvent(resilience.Event{Kind: resilience.EventStateChange, Name: "g", To: c.to})
		_, _, g := r44Collect(t, r)
		if v, ok := g["dependency=g"]; !ok || v != c.want {
			t.Errorf("to %v: gauge %v (%v), want %d (%v)", c.to, v, ok, c.want, g)
		}
	}
}

// An error whose class is past ClassPending: the Listener counts it as
// transient (its doc); the resilience.calls outcome is always one of the
// seven values.
func TestReview44_UnknownClassOutcome(t *testing.T) {
	l, r := r44Listener(t)
	l.OnEvent(resilience.Event{Kind: resilience.EventCallDone, Name: "u", Err: &r44ClassErr{c: 200}})
	l.OnEvent(resilience.Event{Kind: resilience.EventAttempt, Name: "u", Err: &r44ClassErr{c: 7}})
	sums, _, _ := r44Collect(t, r)
	if sums["resilience.calls"]["dependency=u,outcome=transient"] != 1 || sums["resilience.attempts"]["dependency=u,outcome=transient"] != 1 {
		t.Errorf("unknown class: %v %v", sums["resilience.calls"], sums["resilience.attempts"])
	}
}

// "A call that another listener of the same pipeline has timed is recorded
// too, sampled or not."
func TestReview44_SampledButTimedByAnother(t *testing.T) {
	l, r := r44Listener(t, otelevents.SampleDurations(math.MaxInt))
	other := resilience.ListenerFunc(func(resilience.Event) {})
	p := pipeline.New(pipeline.WithName("o"), pipeline.WithListener(l), pipeline.WithListener(other))
	for range 100 {
		_, _ = pipeline.Do(context.Background(), p, func(context.Context) (int, error) { return 1, nil })
	}
	_, hist, _ := r44Collect(t, r)
	var h uint64
	for _, v := range hist {
		h += v
	}
	if h != 100 {
		t.Errorf("%d durations recorded, want 100 (another listener timed every call)", h)
	}
}
