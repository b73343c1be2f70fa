package grpcclient_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/grpc/grpcclient"
	"github.com/resiliencekit/resiliencekit/grpc/grpctest"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// A dependency with a bad deploy: its stream interceptor sends a header
// whose key grpc-go's SERVER refuses (uppercase), and returns grpc-go's
// own error, as a Go handler does. Every stream fails INTERNAL
// "header key ... contains illegal characters" -- made by the server.
// Does the client's breaker ever open?
func TestReview14ServerMadeHeaderKeyInternalCounts(t *testing.T) {
	bad := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		if err := ss.SendHeader(metadata.MD{"X-Trace-Id": {"1"}}); err != nil {
			return err
		}
		return h(srv, ss)
	}
	srv := start(t, grpc.StreamInterceptor(bad))
	b := breaker.New("dep", breaker.ConsecutiveFailures(3), breaker.OpenTimeout(time.Minute))
	var ev events
	client, _ := dial(t, srv, grpcclient.WithPipeline(fastPipeline(pipeline.WithBreaker(b), pipeline.WithListener(&ev))))
	_, first := client.List(t.Context(), "l")
	for range 9 {
		_, _ = client.List(t.Context(), "l")
	}
	t.Logf("first error: %v", first)
	assert.Equal(t, codes.Internal, status.Code(first))
	assert.Equal(t, resilience.StateOpen, b.State(), "10 server-made INTERNAL failures in a row: the breaker should have opened")
}

// Same with a unary dependency that propagates the error of its own
// upstream call (made with bad outgoing metadata): a Go service's
// "return nil, err".
func TestReview14ServerPropagatedHeaderKeyInternalCounts(t *testing.T) {
	upstream := start(t)
	ucc, err := grpc.NewClient(upstream.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { ucc.Close() })
	prop := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		octx := metadata.NewOutgoingContext(ctx, metadata.MD{"X-Tenant": {"a"}}) // a bug in the dependency
		out := new(wrapperspb.StringValue)
		if err := ucc.Invoke(octx, grpctest.Get, wrapperspb.String("x"), out); err != nil {
			return nil, err
		}
		return h(ctx, req)
	}
	srv := start(t, grpc.UnaryInterceptor(prop))
	b := breaker.New("dep", breaker.ConsecutiveFailures(3), breaker.OpenTimeout(time.Minute))
	client, _ := dial(t, srv, grpcclient.WithPipeline(fastPipeline(pipeline.WithBreaker(b))))
	_, first := client.Get(t.Context(), "x")
	for range 9 {
		_, _ = client.Get(t.Context(), "x")
	}
	t.Logf("first error: %v", first)
	assert.Equal(t, codes.Internal, status.Code(first))
	assert.Equal(t, resilience.StateOpen, b.State(), "10 server-made INTERNAL failures in a row: the breaker should have opened")
}

// A server failing with INTERNAL "grpc: Compressor is not installed..."
// or "transport: per-RPC creds failed due to error: oauth2: cannot fetch
// token" (its upstream's token endpoint down, propagated).
func TestReview14ServerPropagatedCredsInternalCounts(t *testing.T) {
	for _, msg := range []string{
		"transport: per-RPC creds failed due to error: oauth2: cannot fetch token: Post \"https://oauth2.googleapis.com/token\": dial tcp: i/o timeout",
		"grpc: Compressor is not installed for requested grpc-encoding \"zstd\"",
		"no codec registered for content-subtype json",
	} {
		t.Run(msg[:20], func(t *testing.T) {
			srv := start(t)
			srv.SetFault(grpctest.Get, grpctest.Fault{Code: codes.Internal, Message: msg})
			b := breaker.New("dep", breaker.ConsecutiveFailures(3), breaker.OpenTimeout(time.Minute))
			client, _ := dial(t, srv, grpcclient.WithPipeline(fastPipeline(pipeline.WithBreaker(b))))
			for range 10 {
				_, _ = client.Get(t.Context(), "x")
			}
			assert.Equal(t, resilience.StateOpen, b.State(), "server-made INTERNAL: should count")
		})
	}
}
