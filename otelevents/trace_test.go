package otelevents_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/resiliencekit/resiliencekit/otelevents"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// recorder returns a provider that records every span, and its recorder.
func recorder(t *testing.T, opts ...sdktrace.TracerProviderOption) (*sdktrace.TracerProvider, *tracetest.SpanRecorder) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(append(opts, sdktrace.WithSpanProcessor(sr))...)
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, sr
}

// attrs returns a span's attributes as key -> value.
func attrs(s sdktrace.ReadOnlySpan) map[string]any {
	m := map[string]any{}
	for _, kv := range s.Attributes() {
		m[string(kv.Key)] = kv.Value.AsInterface()
	}
	return m
}

// exceptions returns the messages of a span's exception events.
func exceptions(s sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, e := range s.Events() {
		if e.Name != "exception" {
			continue
		}
		for _, kv := range e.Attributes {
			if kv.Key == "exception.message" {
				out = append(out, kv.Value.AsString())
			}
		}
	}
	return out
}

// byName returns the ended spans of sr named name, in the order they
// ended.
func byName(sr *tracetest.SpanRecorder, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range sr.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

func TestTracerCallAndAttempts(t *testing.T) {
	tp, sr := recorder(t)
	tr := otelevents.NewTracer(tp)

	ctx, root := tp.Tracer("test").Start(t.Context(), "handler")
	callCtx, call := tr.StartCall(ctx, "payments")
	errBusy := resilience.RetryAfter(errors.New("busy"), 100*time.Millisecond)
	infos := []resilience.AttemptInfo{
		{Number: 1},
		{Number: 2, Delay: 100 * time.Millisecond, RetryAfter: 100 * time.Millisecond, State: resilience.StateClosed},
		{Number: 3, Delay: 180*time.Millisecond + 500*time.Microsecond, State: resilience.StateHalfOpen},
	}
	errs := []error{errBusy, errBusy, nil}
	for i, info := range infos {
		attemptCtx, end := call.StartAttempt(callCtx, info)
		_, hop := tp.Tracer("test").Start(attemptCtx, "POST") // as otelhttp's transport would
		hop.End()
		end(errs[i])
	}
	call.End(nil)
	root.End()

	calls := byName(sr, "resilience payments")
	require.Len(t, calls, 1)
	c := calls[0]
	assert.Equal(t, root.SpanContext().SpanID(), c.Parent().SpanID(), "the call is a child of the caller's span")
	assert.Equal(t, trace.SpanKindInternal, c.SpanKind())
	assert.Equal(t, map[string]any{
		"resilience.dependency": "payments",
		"resilience.outcome":    "success",
		"resilience.attempts":   int64(3),
	}, attrs(c))
	assert.Equal(t, codes.Unset, c.Status().Code, "a retried call that succeeds is no error")
	assert.Empty(t, exceptions(c))
	assert.Equal(t, "github.com/resiliencekit/resiliencekit", c.InstrumentationScope().Name)

	attempts, hops := byName(sr, "resilience payments attempt"), byName(sr, "POST")
	require.Len(t, attempts, 3)
	require.Len(t, hops, 3)
	want := []map[string]any{
		{"resilience.attempt": int64(1), "resilience.delay_ms": 0.0, "resilience.outcome": "transient"},
		{"resilience.attempt": int64(2), "resilience.delay_ms": 100.0, "resilience.retry_after_ms": 100.0, "resilience.outcome": "transient"},
		{"resilience.attempt": int64(3), "resilience.delay_ms": 180.5, "resilience.outcome": "success", "resilience.breaker.state": "half-open"},
	}
	for i, a := range attempts {
		w := map[string]any{"resilience.dependency": "payments", "resilience.breaker.state": "closed"}
		for k, v := range want[i] {
			w[k] = v
		}
		assert.Equal(t, w, attrs(a), "attempt %d", i+1)
		assert.Equal(t, c.SpanContext().SpanID(), a.Parent().SpanID(), "attempt %d is a child of the call", i+1)
		assert.Equal(t, trace.SpanKindInternal, a.SpanKind())
		assert.Equal(t, a.SpanContext().SpanID(), hops[i].Parent().SpanID(), "what attempt %d started is its child", i+1)
	}
	assert.Equal(t, codes.Error, attempts[0].Status().Code)
	assert.Equal(t, "busy", attempts[0].Status().Description)
	assert.Equal(t, []string{"busy"}, exceptions(attempts[1]))
	assert.Equal(t, codes.Unset, attempts[2].Status().Code)
}

func TestTracerStatus(t *testing.T) {
	errBad := errors.New("bad")
	for _, tc := range []struct {
		err     error
		outcome string
		status  codes.Code
	}{
		{nil, "success", codes.Unset},
		{errBad, "transient", codes.Error},
		{resilience.Terminal(errBad), "terminal", codes.Error},
		{resilience.Rejected(errBad), "rejected", codes.Error},
		{resilience.Permanent(errBad), "permanent", codes.Unset},
		{fmt.Errorf("gave up: %w", context.Canceled), "canceled", codes.Unset},
	} {
		t.Run(tc.outcome, func(t *testing.T) {
			tp, sr := recorder(t)
			ctx, call := otelevents.NewTracer(tp).StartCall(t.Context(), "stock")
			_, end := call.StartAttempt(ctx, resilience.AttemptInfo{Number: 1})
			end(tc.err)
			call.End(tc.err)

			spans := sr.Ended()
			require.Len(t, spans, 2)
			for _, s := range spans {
				assert.Equal(t, tc.outcome, attrs(s)["resilience.outcome"], s.Name())
				assert.Equal(t, tc.status, s.Status().Code, s.Name())
				if tc.err == nil {
					assert.Empty(t, exceptions(s), "success records no error")
				} else {
					assert.Equal(t, []string{tc.err.Error()}, exceptions(s), "every error is recorded")
				}
			}
		})
	}
}

func TestTracerSpanOptions(t *testing.T) {
	peer := attribute.String("peer.service", "ledger")
	for _, tc := range []struct {
		name, dependency  string
		info              resilience.AttemptInfo
		callName, attempt string
		want              map[string]any // of the attempt, beside the outcome and the peer
	}{
		{
			name: "unnamed", info: resilience.AttemptInfo{Number: 1},
			callName: "resilience", attempt: "resilience attempt",
			want: map[string]any{"resilience.attempt": int64(1), "resilience.delay_ms": 0.0, "resilience.breaker.state": "closed"},
		},
		{
			name: "hedge", dependency: "ledger", info: resilience.AttemptInfo{Number: 2, Hedge: true, State: resilience.StateOpen},
			callName: "resilience ledger", attempt: "resilience ledger attempt",
			want: map[string]any{"resilience.dependency": "ledger", "resilience.attempt": int64(2), "resilience.delay_ms": 0.0,
				"resilience.breaker.state": "open", "resilience.hedge": true},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tp, sr := recorder(t)
			ctx, call := otelevents.NewTracer(tp, otelevents.WithAttributes(peer), nil).StartCall(t.Context(), tc.dependency)
			_, end := call.StartAttempt(ctx, tc.info)
			end(nil)
			call.End(nil)

			calls, attempts := byName(sr, tc.callName), byName(sr, tc.attempt)
			require.Len(t, calls, 1)
			require.Len(t, attempts, 1)
			assert.Equal(t, "ledger", attrs(calls[0])["peer.service"])
			tc.want["resilience.outcome"] = "success"
			tc.want["peer.service"] = "ledger"
			assert.Equal(t, tc.want, attrs(attempts[0]))
		})
	}
}

// An attempt is a child of its call even when it starts in the context of
// another attempt, as a hedge might.
func TestTracerAttemptParentIsTheCall(t *testing.T) {
	tp, sr := recorder(t)
	ctx, call := otelevents.NewTracer(tp).StartCall(t.Context(), "stock")
	firstCtx, endFirst := call.StartAttempt(ctx, resilience.AttemptInfo{Number: 1})
	_, endHedge := call.StartAttempt(firstCtx, resilience.AttemptInfo{Number: 2, Hedge: true})
	endHedge(nil)
	endFirst(context.Canceled)
	call.End(nil)

	callSpan := byName(sr, "resilience stock")
	require.Len(t, callSpan, 1)
	attempts := byName(sr, "resilience stock attempt")
	require.Len(t, attempts, 2)
	for _, a := range attempts {
		assert.Equal(t, callSpan[0].SpanContext().SpanID(), a.Parent().SpanID())
	}
	assert.Equal(t, codes.Unset, attempts[1].Status().Code, "a hedge that lost is not an error")
}

func TestTracerConcurrentAttempts(t *testing.T) {
	tp, sr := recorder(t)
	ctx, call := otelevents.NewTracer(tp).StartCall(t.Context(), "stock")
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			_, end := call.StartAttempt(ctx, resilience.AttemptInfo{Number: i + 1, Hedge: i > 0})
			end(nil)
		})
	}
	wg.Wait()
	call.End(nil)

	calls := byName(sr, "resilience stock")
	require.Len(t, calls, 1)
	assert.Equal(t, int64(8), attrs(calls[0])["resilience.attempts"])
	assert.Len(t, byName(sr, "resilience stock attempt"), 8)
}

func TestTracerConcurrentCalls(t *testing.T) {
	tp, sr := recorder(t)
	tr := otelevents.NewTracer(tp)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			ctx, call := tr.StartCall(t.Context(), fmt.Sprintf("dep-%d", i%2))
			for n := 1; n <= 2; n++ {
				_, end := call.StartAttempt(ctx, resilience.AttemptInfo{Number: n})
				end(nil)
			}
			call.End(nil)
		})
	}
	wg.Wait()
	for _, name := range []string{"dep-0", "dep-1"} {
		assert.Len(t, byName(sr, "resilience "+name), 4)
		assert.Len(t, byName(sr, "resilience "+name+" attempt"), 8)
	}
}

// A call that is sampled out starts no attempt spans; the attempt runs in
// the call's context, whose span context the next hop sees.
func TestTracerSampledOut(t *testing.T) {
	tp, sr := recorder(t, sdktrace.WithSampler(sdktrace.NeverSample()))
	callCtx, call := otelevents.NewTracer(tp).StartCall(t.Context(), "stock")
	attemptCtx, end := call.StartAttempt(callCtx, resilience.AttemptInfo{Number: 1})
	assert.Equal(t, callCtx, attemptCtx)
	assert.True(t, trace.SpanContextFromContext(attemptCtx).IsValid(), "the trace goes on, unsampled")
	assert.False(t, trace.SpanContextFromContext(attemptCtx).IsSampled())
	end(errors.New("down"))
	call.End(errors.New("down"))
	assert.Empty(t, sr.Started())
}

func TestTracerRecordsNothing(t *testing.T) {
	for name, tr := range map[string]*otelevents.Tracer{
		"nil":  nil,
		"zero": {},
		"noop": otelevents.NewTracer(noop.NewTracerProvider()),
	} {
		t.Run(name, func(t *testing.T) {
			callCtx, call := tr.StartCall(t.Context(), "stock")
			_, end := call.StartAttempt(callCtx, resilience.AttemptInfo{Number: 1})
			end(errors.New("down"))
			call.End(errors.New("down"))
			assert.False(t, trace.SpanContextFromContext(callCtx).IsValid())
		})
	}
}

func TestNewTracerNilIsTheGlobalProvider(t *testing.T) {
	tp, sr := recorder(t)
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { otel.SetTracerProvider(prev) })

	_, call := otelevents.NewTracer(nil).StartCall(t.Context(), "stock")
	call.End(nil)
	assert.Len(t, byName(sr, "resilience stock"), 1)
}

// A Tracer keeps what the spans of a dependency share for a few hundred
// dependencies, and makes it for each call beyond.
func TestTracerManyDependencies(t *testing.T) {
	tp, sr := recorder(t)
	tr := otelevents.NewTracer(tp)
	const n = 300
	for i := range n {
		for range 2 {
			ctx, call := tr.StartCall(t.Context(), fmt.Sprintf("host-%d", i))
			_, end := call.StartAttempt(ctx, resilience.AttemptInfo{Number: 1})
			end(nil)
			call.End(nil)
		}
	}
	for _, i := range []int{0, n - 1} {
		name := fmt.Sprintf("host-%d", i)
		calls := byName(sr, "resilience "+name)
		require.Len(t, calls, 2, name)
		assert.Equal(t, name, attrs(calls[1])["resilience.dependency"])
		attempts := byName(sr, "resilience "+name+" attempt")
		require.Len(t, attempts, 2, name)
		assert.Equal(t, name, attrs(attempts[1])["resilience.dependency"])
	}
}
