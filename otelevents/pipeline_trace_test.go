package otelevents_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/otelevents"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// children returns the spans of sr whose parent is parent, in the order
// they ended.
func children(sr *tracetest.SpanRecorder, parent sdktrace.ReadOnlySpan) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range sr.Ended() {
		if s.Parent().SpanID() == parent.SpanContext().SpanID() {
			out = append(out, s)
		}
	}
	return out
}

// A call that succeeds at its third attempt: one call span, three attempt
// spans with the delays slept and the retry-after hints that set them.
func TestPipelineTraceRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tp, sr := recorder(t)
		p := pipeline.New(pipeline.WithName("payments"),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.Jitter(retrypolicy.None), retrypolicy.MaxAttempts(3))),
			pipeline.WithTracer(otelevents.NewTracer(tp)))
		hints := []time.Duration{300 * time.Millisecond, 50 * time.Millisecond} // the retry's own: 100, 200 ms
		var calls atomic.Int32
		got, err := pipeline.Do(t.Context(), p, func(ctx context.Context) (string, error) {
			if n := calls.Add(1); int(n) <= len(hints) {
				return "", resilience.RetryAfter(errors.New("busy"), hints[n-1])
			}
			return "paid", nil
		})
		require.NoError(t, err)
		assert.Equal(t, "paid", got)

		call := byName(sr, "resilience payments")
		require.Len(t, call, 1)
		assert.Equal(t, map[string]any{
			"resilience.dependency": "payments", "resilience.outcome": "success", "resilience.attempts": int64(3),
		}, attrs(call[0]))
		assert.Equal(t, codes.Unset, call[0].Status().Code)

		attempts := children(sr, call[0])
		want := []struct {
			delay, retryAfter any
			outcome           string
			status            codes.Code
		}{
			{0.0, nil, "transient", codes.Error},
			{300.0, 300.0, "transient", codes.Error}, // the hint is longer than the backoff
			{200.0, 50.0, "success", codes.Unset},    // and then shorter
		}
		require.Len(t, attempts, len(want))
		for i, a := range attempts {
			kv := attrs(a)
			assert.Equal(t, "resilience payments attempt", a.Name())
			assert.Equal(t, int64(i+1), kv["resilience.attempt"])
			assert.Equal(t, want[i].delay, kv["resilience.delay_ms"], "attempt %d", i+1)
			assert.Equal(t, want[i].retryAfter, kv["resilience.retry_after_ms"], "attempt %d", i+1)
			assert.Equal(t, want[i].outcome, kv["resilience.outcome"], "attempt %d", i+1)
			assert.Equal(t, "closed", kv["resilience.breaker.state"])
			assert.Equal(t, want[i].status, a.Status().Code, "attempt %d", i+1)
		}
		assert.Equal(t, 300*time.Millisecond, attempts[1].StartTime().Sub(attempts[0].EndTime()), "the gap is the delay")
	})
}

// traced is a RoundTripper that starts a client span from the request's
// context, as otelhttp's would, and sends it to the server in a
// traceparent header.
type traced struct {
	tracer trace.Tracer
	base   http.RoundTripper
}

func (rt traced) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx, span := rt.tracer.Start(req.Context(), "client", trace.WithSpanKind(trace.SpanKindClient))
	defer span.End()
	req = req.Clone(ctx) // a RoundTripper does not modify its request
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(req.Header))
	return rt.base.RoundTrip(req)
}

// Over HTTP, what the transport and the next hop start in an attempt's
// context are children of the attempt's span.
func TestPipelineTraceHTTP(t *testing.T) {
	tp, sr := recorder(t)
	var served atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := propagation.TraceContext{}.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		_, span := tp.Tracer("server").Start(ctx, "server", trace.WithSpanKind(trace.SpanKindServer))
		defer span.End()
		if served.Add(1) <= 2 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	}))
	defer srv.Close()
	base := &http.Transport{}
	defer base.CloseIdleConnections()

	p := pipeline.New(pipeline.WithName("orders"),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(time.Millisecond), retrypolicy.MaxAttempts(3))),
		pipeline.WithTracer(otelevents.NewTracer(tp)))
	client := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(p),
		httpclient.Base(traced{tracer: tp.Tracer("client"), base: base}))}

	ctx, root := tp.Tracer("test").Start(t.Context(), "handler")
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	require.NoError(t, err)
	resp, err := client.Do(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	root.End()

	call := byName(sr, "resilience orders")
	require.Len(t, call, 1)
	assert.Equal(t, root.SpanContext().SpanID(), call[0].Parent().SpanID())
	assert.Equal(t, int64(3), attrs(call[0])["resilience.attempts"])
	attempts := children(sr, call[0])
	require.Len(t, attempts, 3)
	for i, a := range attempts {
		assert.Equal(t, int64(i+1), attrs(a)["resilience.attempt"])
		clientSpans := children(sr, a)
		require.Len(t, clientSpans, 1, "attempt %d", i+1)
		assert.Equal(t, "client", clientSpans[0].Name())
		serverSpans := children(sr, clientSpans[0])
		require.Len(t, serverSpans, 1, "attempt %d reached the server", i+1)
		assert.Equal(t, call[0].SpanContext().TraceID(), serverSpans[0].SpanContext().TraceID(), "one trace")
	}
	assert.Equal(t, "transient", attrs(attempts[0])["resilience.outcome"], "a 503")
	assert.Equal(t, codes.Error, attempts[1].Status().Code)
	assert.Equal(t, "success", attrs(attempts[2])["resilience.outcome"])
}

// A call that the breaker rejects has a span with its rejection and no
// attempts.
func TestPipelineTraceBreakerRejection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tp, sr := recorder(t)
		b := breaker.New("stock", breaker.ConsecutiveFailures(1))
		p := pipeline.New(pipeline.WithBreaker(b),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(2))),
			pipeline.WithTracer(otelevents.NewTracer(tp)))
		down := func(context.Context) (int, error) { return 0, resilience.Terminal(errors.New("down")) }
		_, err := pipeline.Do(t.Context(), p, down)
		require.Error(t, err)
		_, err = pipeline.Do(t.Context(), p, down)
		require.ErrorIs(t, err, breaker.ErrOpen)

		calls := byName(sr, "resilience stock")
		require.Len(t, calls, 2)
		require.Len(t, children(sr, calls[0]), 1, "the first call made its attempt")
		rejected := calls[1]
		assert.Empty(t, children(sr, rejected), "the rejected call made none")
		assert.Equal(t, map[string]any{
			"resilience.dependency": "stock", "resilience.outcome": "terminal", "resilience.attempts": int64(0),
		}, attrs(rejected))
		assert.Equal(t, codes.Error, rejected.Status().Code)
		assert.Equal(t, []string{err.Error()}, exceptions(rejected))
	})
}

// A hedge is an attempt span of its own, flagged, beside the attempt it
// raced; the loser, canceled, is no error.
func TestPipelineTraceHedge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tp, sr := recorder(t)
		p := pipeline.New(pipeline.WithName("search"),
			pipeline.WithHedging(hedge.New(hedge.Delay(50*time.Millisecond), hedge.MaxExtra(1))),
			pipeline.WithTracer(otelevents.NewTracer(tp)))
		var calls atomic.Int32
		_, err := pipeline.Do(t.Context(), p, func(ctx context.Context) (int, error) {
			if calls.Add(1) == 1 {
				<-ctx.Done() // slow: the hedge wins
				return 0, ctx.Err()
			}
			return 1, nil
		})
		require.NoError(t, err)
		synctest.Wait() // the loser's end

		call := byName(sr, "resilience search")
		require.Len(t, call, 1)
		attempts := children(sr, call[0])
		require.Len(t, attempts, 2)
		byNumber := map[int64]map[string]any{}
		status := map[int64]codes.Code{}
		for _, a := range attempts {
			n := attrs(a)["resilience.attempt"].(int64)
			byNumber[n], status[n] = attrs(a), a.Status().Code
		}
		assert.Equal(t, "canceled", byNumber[1]["resilience.outcome"])
		assert.Equal(t, codes.Unset, status[1], "a hedge that lost is no error")
		assert.Nil(t, byNumber[1]["resilience.hedge"])
		assert.Equal(t, true, byNumber[2]["resilience.hedge"])
		assert.Equal(t, "success", byNumber[2]["resilience.outcome"])
		assert.Equal(t, 0.0, byNumber[2]["resilience.delay_ms"], "a hedge is sent while the other runs")
	})
}
