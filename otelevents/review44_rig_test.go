package otelevents_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/resiliencekit/resiliencekit/otelevents"
)

// r44Watch is a span processor that checks, as each span starts, that its
// parent has not ended, and counts starts and ends.
type r44Watch struct {
	mu         sync.Mutex
	ended      map[trace.SpanID]bool
	started    map[trace.SpanID]string
	violations []string
	starts     atomic.Int64
	ends       atomic.Int64
}

func newR44Watch() *r44Watch {
	return &r44Watch{ended: map[trace.SpanID]bool{}, started: map[trace.SpanID]string{}}
}

func (w *r44Watch) OnStart(_ context.Context, s sdktrace.ReadWriteSpan) {
	w.starts.Add(1)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.started[s.SpanContext().SpanID()] = s.Name()
	if p := s.Parent(); p.IsValid() && w.ended[p.SpanID()] {
		w.violations = append(w.violations, fmt.Sprintf("%q started under %q (%v), which had ended", s.Name(), w.started[p.SpanID()], p.SpanID()))
	}
}

func (w *r44Watch) OnEnd(s sdktrace.ReadOnlySpan) {
	w.ends.Add(1)
	w.mu.Lock()
	w.ended[s.SpanContext().SpanID()] = true
	w.mu.Unlock()
}
func (w *r44Watch) Shutdown(context.Context) error   { return nil }
func (w *r44Watch) ForceFlush(context.Context) error { return nil }

func (w *r44Watch) check(t testing.TB) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, v := range w.violations {
		if i == 5 {
			t.Errorf("... %d in all", len(w.violations))
			break
		}
		t.Error(v)
	}
}

// waitEnded waits up to d for every started span to have ended.
func (w *r44Watch) waitEnded(t testing.TB, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for w.starts.Load() != w.ends.Load() {
		if time.Now().After(deadline) {
			w.mu.Lock()
			var open []string
			for id, n := range w.started {
				if !w.ended[id] {
					open = append(open, n)
				}
			}
			w.mu.Unlock()
			t.Errorf("%d spans started, %d ended; open: %v", w.starts.Load(), w.ends.Load(), open)
			return
		}
		time.Sleep(time.Millisecond)
	}
}

type r44Rig struct {
	tp     *sdktrace.TracerProvider
	rec    *tracetest.SpanRecorder
	watch  *r44Watch
	tracer *otelevents.Tracer
	op     trace.Tracer // for the operation's own spans
}

func newR44Rig(opts ...sdktrace.TracerProviderOption) *r44Rig {
	r := &r44Rig{rec: tracetest.NewSpanRecorder(), watch: newR44Watch()}
	opts = append([]sdktrace.TracerProviderOption{sdktrace.WithSpanProcessor(r.watch), sdktrace.WithSpanProcessor(r.rec)}, opts...)
	r.tp = sdktrace.NewTracerProvider(opts...)
	r.tracer = otelevents.NewTracer(r.tp)
	r.op = r.tp.Tracer("op")
	return r
}

// spans of a trace, by kind.
type r44Tree struct {
	call     sdktrace.ReadOnlySpan
	attempts []sdktrace.ReadOnlySpan // in order of attempt number
	ops      []sdktrace.ReadOnlySpan
}

func r44Attr(s sdktrace.ReadOnlySpan, k string) (attribute.Value, bool) {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == k {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

func r44Int(s sdktrace.ReadOnlySpan, k string) int64 {
	v, ok := r44Attr(s, k)
	if !ok {
		return -1
	}
	return v.AsInt64()
}

func r44Str(s sdktrace.ReadOnlySpan, k string) string {
	v, ok := r44Attr(s, k)
	if !ok {
		return "<absent>"
	}
	return v.Emit()
}

func r44Float(s sdktrace.ReadOnlySpan, k string) (float64, bool) {
	v, ok := r44Attr(s, k)
	return v.AsFloat64(), ok
}

func r44Exceptions(s sdktrace.ReadOnlySpan) int {
	n := 0
	for _, e := range s.Events() {
		if e.Name == "exception" {
			n++
		}
	}
	return n
}

// trees groups the ended spans into their calls.
func (r *r44Rig) trees(t testing.TB) map[trace.SpanID]*r44Tree {
	t.Helper()
	byID := map[trace.SpanID]*r44Tree{}
	spans := r.rec.Ended()
	for _, s := range spans {
		if strings.HasPrefix(s.Name(), "resilience") && !strings.HasSuffix(s.Name(), " attempt") {
			byID[s.SpanContext().SpanID()] = &r44Tree{call: s}
		}
	}
	attemptOf := map[trace.SpanID]*r44Tree{}
	for _, s := range spans {
		if strings.HasSuffix(s.Name(), " attempt") {
			tr := byID[s.Parent().SpanID()]
			if tr == nil {
				t.Errorf("attempt span %q #%d has no call span as parent", s.Name(), r44Int(s, "resilience.attempt"))
				continue
			}
			tr.attempts = append(tr.attempts, s)
			attemptOf[s.SpanContext().SpanID()] = tr
		}
	}
	for _, s := range spans {
		if s.Name() == "op" {
			tr := attemptOf[s.Parent().SpanID()]
			if tr == nil {
				t.Errorf("op span's parent %v is not an attempt span", s.Parent().SpanID())
				continue
			}
			tr.ops = append(tr.ops, s)
		}
	}
	for _, tr := range byID {
		sortByAttempt(tr.attempts)
	}
	return byID
}

func sortByAttempt(ss []sdktrace.ReadOnlySpan) {
	for i := 1; i < len(ss); i++ {
		for j := i; j > 0 && r44Int(ss[j], "resilience.attempt") < r44Int(ss[j-1], "resilience.attempt"); j-- {
			ss[j], ss[j-1] = ss[j-1], ss[j]
		}
	}
}

func (r *r44Rig) one(t testing.TB) *r44Tree {
	t.Helper()
	ts := r.trees(t)
	if len(ts) != 1 {
		t.Fatalf("%d call spans, want 1", len(ts))
	}
	for _, tr := range ts {
		return tr
	}
	return nil
}

func statusOf(s sdktrace.ReadOnlySpan) codes.Code { return s.Status().Code }

// opSpan runs inside op: starts and ends a child span, as otelhttp would.
func (r *r44Rig) opSpan(ctx context.Context) {
	_, s := r.op.Start(ctx, "op")
	s.End()
}

// r44CountingTP counts the spans its tracers start, recording or not.
type r44CountingTP struct {
	trace.TracerProvider
	n atomic.Int64
}

func (c *r44CountingTP) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	return &r44CountingTracer{Tracer: c.TracerProvider.Tracer(name, opts...), n: &c.n}
}

func (c *r44CountingTP) starts() int64 { return c.n.Load() }

type r44CountingTracer struct {
	trace.Tracer
	n *atomic.Int64
}

func (c *r44CountingTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	c.n.Add(1)
	return c.Tracer.Start(ctx, name, opts...)
}

func newTracerFrom(tp trace.TracerProvider) *otelevents.Tracer { return otelevents.NewTracer(tp) }
