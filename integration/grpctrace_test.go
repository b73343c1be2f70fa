package integration_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/grpc/grpcclient"
	"github.com/resiliencekit/resiliencekit/grpc/grpctest"
	"github.com/resiliencekit/resiliencekit/otelevents"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// mdCarrier carries a trace context in gRPC metadata, as otelgrpc does.
type mdCarrier metadata.MD

func (c mdCarrier) Get(k string) string {
	if v := metadata.MD(c).Get(k); len(v) > 0 {
		return v[0]
	}
	return ""
}
func (c mdCarrier) Set(k, v string) { metadata.MD(c).Set(k, v) }
func (c mdCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// TestGRPCTraceShowsEveryAttempt: through grpcclient with the
// OpenTelemetry tracer, a call that succeeds at its third attempt is one
// call span with three attempt spans (number, delay, pushback used,
// breaker state, outcome); what the client interceptors after it start
// (as otelgrpc's would) are children of each attempt, and the server's
// spans, reached by the propagated trace context, are in the same trace.
// The same for a server stream retried before its first message.
func TestGRPCTraceShowsEveryAttempt(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	prop := propagation.TraceContext{}
	serverSpan := func(ctx context.Context, name string) trace.Span {
		md, _ := metadata.FromIncomingContext(ctx)
		_, span := tp.Tracer("server").Start(prop.Extract(ctx, mdCarrier(md)), name, trace.WithSpanKind(trace.SpanKindServer))
		return span
	}
	srv, err := grpctest.Start(
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			defer serverSpan(ctx, "server").End()
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			defer serverSpan(ss.Context(), "server").End()
			return h(srv, ss)
		}))
	require.NoError(t, err)
	t.Cleanup(srv.Close)

	inject := func(ctx context.Context) (context.Context, trace.Span) {
		ctx, span := tp.Tracer("client").Start(ctx, "client", trace.WithSpanKind(trace.SpanKindClient))
		md, _ := metadata.FromOutgoingContext(ctx)
		if md == nil {
			md = metadata.MD{}
		}
		prop.Inject(ctx, mdCarrier(md))
		return metadata.NewOutgoingContext(ctx, md), span
	}
	p := pipeline.New(pipeline.WithName("orders"),
		pipeline.WithBreaker(breaker.New("orders")),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(time.Millisecond), retrypolicy.MaxAttempts(3))),
		pipeline.WithTracer(otelevents.NewTracer(tp)))
	ic := grpcclient.New(grpcclient.WithPipeline(p))
	cc, err := grpctest.Dial(srv.Addr, append(ic.DialOptions(), // the resilient interceptors first, then the tracing one
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			ctx, span := inject(ctx)
			defer span.End()
			return invoker(ctx, method, req, reply, cc, opts...)
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			ctx, span := inject(ctx)
			defer span.End() // the stream is open: enough for the trace's shape
			return streamer(ctx, desc, cc, method, opts...)
		}))...)
	require.NoError(t, err)
	t.Cleanup(func() { cc.Close() })
	client := grpctest.NewClient(cc)

	for _, tc := range []struct {
		name       string
		method     string
		fault      grpctest.Fault
		call       func(context.Context) error
		attempts   int
		retryAfter any // of the second attempt, in ms
	}{
		{name: "unary", method: grpctest.Get, attempts: 3, retryAfter: 40.0,
			fault: grpctest.Fault{Code: codes.Unavailable, Calls: 2, Pushback: "40"},
			call:  func(ctx context.Context) error { _, err := client.Get(ctx, "a"); return err }},
		{name: "server stream", method: grpctest.List, attempts: 2, retryAfter: nil,
			fault: grpctest.Fault{Code: codes.Unavailable, Calls: 1},
			call:  func(ctx context.Context) error { _, err := client.List(ctx, "a"); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sr.Reset()
			srv.Reset()
			srv.SetFault(tc.method, tc.fault)
			ctx, root := tp.Tracer("test").Start(t.Context(), "handler")
			require.NoError(t, tc.call(ctx))
			root.End()

			var call sdktrace.ReadOnlySpan
			require.Eventually(t, func() bool {
				for _, s := range sr.Ended() {
					if s.Name() == "resilience orders" {
						call = s
						return true
					}
				}
				return false
			}, time.Second, time.Millisecond)
			assert.Equal(t, root.SpanContext().SpanID(), call.Parent().SpanID(), "the call is the caller's child")
			assert.Equal(t, int64(tc.attempts), spanAttrs(call)["resilience.attempts"])
			attempts := childSpans(sr, call)
			require.Len(t, attempts, tc.attempts)
			for i, a := range attempts {
				kv := spanAttrs(a)
				assert.Equal(t, int64(i+1), kv["resilience.attempt"])
				assert.Equal(t, "closed", kv["resilience.breaker.state"])
				want := "transient"
				if i == tc.attempts-1 {
					want = "success"
				}
				assert.Equal(t, want, kv["resilience.outcome"], "attempt %d", i+1)
				if i > 0 {
					assert.Contains(t, kv, "resilience.delay_ms", "attempt %d: the delay slept before it", i+1)
				}
				clientSpans := childSpans(sr, a)
				require.Len(t, clientSpans, 1, "attempt %d: the interceptor after grpcclient sees each attempt", i+1)
				require.Eventually(t, func() bool { return len(childSpans(sr, clientSpans[0])) == 1 }, time.Second, time.Millisecond,
					"attempt %d reached the server, in the same trace", i+1)
			}
			assert.Equal(t, tc.retryAfter, spanAttrs(attempts[1])["resilience.retry_after_ms"], "the pushback used")
		})
	}
}

// childSpans returns the ended spans of sr whose parent is parent.
func childSpans(sr *tracetest.SpanRecorder, parent sdktrace.ReadOnlySpan) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range sr.Ended() {
		if s.Parent().SpanID() == parent.SpanContext().SpanID() {
			out = append(out, s)
		}
	}
	return out
}

// spanAttrs returns a span's attributes as key -> value.
func spanAttrs(s sdktrace.ReadOnlySpan) map[string]any {
	m := map[string]any{}
	for _, kv := range s.Attributes() {
		m[string(kv.Key)] = kv.Value.AsInterface()
	}
	return m
}
