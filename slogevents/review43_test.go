package slogevents_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/registry"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/slogevents"
	"github.com/resiliencekit/resiliencekit/throttle"
)

// review43Handler counts the records by level and the Enabled questions.
type review43Handler struct {
	lv      slog.Leveler
	enabled atomic.Int64
	mu      sync.Mutex
	recs    []slog.Record
}

func (h *review43Handler) Enabled(_ context.Context, l slog.Level) bool {
	h.enabled.Add(1)
	return l >= h.lv.Level()
}
func (h *review43Handler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.recs = append(h.recs, r)
	h.mu.Unlock()
	return nil
}
func (h *review43Handler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *review43Handler) WithGroup(string) slog.Handler      { return h }

// review43Counting is the slogevents listener with its OnEvent counted by
// kind; Wants is the listener's own.
type review43Counting struct {
	*slogevents.Listener
	mu sync.Mutex
	by map[resilience.EventKind]int
}

func (c *review43Counting) OnEvent(e resilience.Event) {
	c.mu.Lock()
	c.by[e.Kind]++
	c.mu.Unlock()
	c.Listener.OnEvent(e)
}

func review43Workload(p *pipeline.Pipeline) {
	down := errors.New("down")
	for i := range 2000 {
		_, _ = pipeline.Do(context.Background(), p, func(context.Context) (int, error) {
			if i%3 == 0 {
				return 0, down
			}
			return 1, nil
		})
	}
}

func review43Pipeline(l resilience.Listener) *pipeline.Pipeline {
	return pipeline.New(
		pipeline.WithBreaker(breaker.New("dep", breaker.ConsecutiveFailures(1<<20))),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(2), retrypolicy.WithSleep(func(context.Context, time.Duration) error { return nil }))),
		pipeline.WithThrottle(throttle.New()),
		pipeline.WithListener(l),
	)
}

// At Info, the pipeline passes the listener no event logged at Debug:
// "it wants only the events its logger is enabled for, so that a
// pipeline skips the rest".
func TestReview43InfoLoggerIsToldNoDebugEvent(t *testing.T) {
	h := &review43Handler{lv: slog.LevelInfo}
	c := &review43Counting{Listener: slogevents.New(slog.New(h)), by: map[resilience.EventKind]int{}}
	review43Workload(review43Pipeline(c))
	for k, n := range c.by {
		switch k {
		case resilience.EventStateChange, resilience.EventRetriesExhausted, resilience.EventNotRetried, resilience.EventQuotaExhausted, resilience.EventTimeBudgetExceeded:
			continue
		}
		t.Errorf("the pipeline passed %d events of kind %v (logged at Debug) to a listener at Info", n, k)
	}
	t.Logf("events passed: %v; records: %d; Enabled asked %d times for 2000 calls", c.by, len(h.recs), h.enabled.Load())
	for _, r := range h.recs {
		if r.Level < slog.LevelInfo {
			t.Errorf("a record at %v", r.Level)
		}
	}
}

// The same with the registry's listener on the pipeline too (it times one
// call in SampleEvery): still no Debug event to the logger.
func TestReview43InfoLoggerWithTheRegistry(t *testing.T) {
	h := &review43Handler{lv: slog.LevelInfo}
	c := &review43Counting{Listener: slogevents.New(slog.New(h)), by: map[resilience.EventKind]int{}}
	p, err := registry.New().AddPipeline(review43Pipeline(c))
	if err != nil {
		t.Fatal(err)
	}
	review43Workload(p)
	for k, n := range c.by {
		if k == resilience.EventCallDone || k == resilience.EventAttempt || k == resilience.EventRetry {
			t.Errorf("the pipeline passed %d events of kind %v to a listener at Info", n, k)
		}
	}
	t.Logf("events passed: %v", c.by)
}

// A level changed at run time (slog.LevelVar) takes effect on the next
// calls, both ways, and calls ended at Debug carry their durations.
func TestReview43LevelVarChangesAtRunTime(t *testing.T) {
	var lv slog.LevelVar
	lv.Set(slog.LevelInfo)
	h := &review43Handler{lv: &lv}
	p := review43Pipeline(slogevents.New(slog.New(h)))
	op := func(context.Context) (int, error) { time.Sleep(time.Millisecond); return 1, nil }
	_, _ = pipeline.Do(context.Background(), p, op)
	if len(h.recs) != 0 {
		t.Fatalf("records at Info: %d", len(h.recs))
	}
	lv.Set(slog.LevelDebug)
	_, _ = pipeline.Do(context.Background(), p, op)
	var done int
	for _, r := range h.recs {
		if r.Message == "resilience call_done" {
			done++
			r.Attrs(func(a slog.Attr) bool {
				if a.Key == "duration" && a.Value.Duration() < time.Millisecond {
					t.Errorf("call_done duration %v, want >= 1ms", a.Value.Duration())
				}
				return true
			})
		}
	}
	if done != 1 {
		t.Errorf("call_done records at Debug: %d, want 1 (records %d)", done, len(h.recs))
	}
	lv.Set(slog.LevelWarn)
	n := len(h.recs)
	_, _ = pipeline.Do(context.Background(), p, op)
	if len(h.recs) != n {
		t.Errorf("records after going back to Warn: %d more", len(h.recs)-n)
	}
}

// The zero Listener follows slog.Default, also as it changes.
func TestReview43ZeroListenerFollowsDefault(t *testing.T) {
	old := slog.Default()
	defer slog.SetDefault(old)
	h := &review43Handler{lv: slog.LevelDebug}
	slog.SetDefault(slog.New(h))
	var l slogevents.Listener
	p := review43Pipeline(&l)
	_, _ = pipeline.Do(context.Background(), p, func(context.Context) (int, error) { return 1, nil })
	if len(h.recs) == 0 {
		t.Error("the zero Listener logged nothing to slog.Default at Debug")
	}
}

// BenchmarkReview43ClockReads: a pipeline whose only listener is an Info
// slogevents one against a pipeline without listener and one with a
// listener that wants nothing but state changes: if the Info one read the
// clock for durations it would cost about as much as WantsCallDone.
func BenchmarkReview43ClockReads(b *testing.B) {
	op := func(context.Context) (int, error) { return 1, nil }
	stateOnly := review43Filter(func(k resilience.EventKind) bool { return k == resilience.EventStateChange })
	callDone := review43Filter(func(k resilience.EventKind) bool { return k == resilience.EventCallDone })
	for _, c := range []struct {
		name string
		l    resilience.Listener
	}{
		{"NoListener", nil},
		{"StateOnly", stateOnly},
		{"SlogInfo", slogevents.New(slog.New(&review43Handler{lv: slog.LevelInfo}))},
		{"WantsCallDone", callDone},
	} {
		b.Run(c.name, func(b *testing.B) {
			p := pipeline.New(pipeline.WithBreaker(breaker.New("dep")), pipeline.WithListener(c.l))
			b.ReportAllocs()
			for b.Loop() {
				_, _ = pipeline.Do(context.Background(), p, op)
			}
		})
	}
}

type review43Filter func(resilience.EventKind) bool

func (f review43Filter) Wants(k resilience.EventKind) bool { return f(k) }
func (review43Filter) OnEvent(resilience.Event)            {}
