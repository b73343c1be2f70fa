package grpcsignal_test

// Review 23 (its NoteRetried, since taken out: the handler marks its
// error): 59af432 gave retrysignal.Handler NoteRetried, so that an
// SDK's error of its own, made of the last answer of httpclient's
// Transport, does not lose the "don't retry" (16 requests instead of 4).
// grpcsignal's server interceptors did not get it.

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/resiliencekit/resiliencekit/grpc/grpcclient"
	"github.com/resiliencekit/resiliencekit/grpc/grpcsignal"
	"github.com/resiliencekit/resiliencekit/grpc/grpctest"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// A gRPC service whose handler calls an HTTP API through an SDK on
// httpclient's Transport (4 attempts); the SDK makes an error of its own
// of the last answer, a 503, and the handler answers UNAVAILABLE, as one
// does for a dependency that is down. Its caller, through grpcclient with
// 4 attempts, retries it: the API gets 16 requests, the multiplication
// package retrysignal exists to stop.
func TestReview23AnSDKsErrorLosesTheSignalOverGRPC(t *testing.T) {
	var apiCalls atomic.Int64
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		apiCalls.Add(1)
		http.Error(w, "down", http.StatusServiceUnavailable)
	}))
	defer api.Close()
	four := func() *pipeline.Pipeline {
		return pipeline.New(pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(4), retrypolicy.BaseDelay(time.Millisecond))))
	}
	sdk := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(four()))}
	// The service's handler, as an interceptor standing in for its method.
	handler := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, _ grpc.UnaryHandler) (any, error) {
		r, _ := http.NewRequestWithContext(ctx, http.MethodGet, api.URL+"/orders/7", nil)
		resp, err := sdk.Do(r)
		if err != nil {
			return nil, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		// The SDK's error, made a status, marked as what the layer below
		// retried (resilience.Terminal), as grpcsignal's docs say to.
		return nil, resilience.Terminal(status.Errorf(codes.Unavailable, "orders api: %s", resp.Status))
	}
	srv, err := grpctest.Start(grpc.ChainUnaryInterceptor(grpcsignal.UnaryServerInterceptor, handler))
	require.NoError(t, err)
	defer srv.Close()

	ic := grpcclient.New(grpcclient.WithPipeline(four()))
	cc, err := grpctest.Dial(srv.Addr, ic.DialOptions()...)
	require.NoError(t, err)
	defer cc.Close()
	_, err = grpctest.NewClient(cc).Get(context.Background(), "7")
	require.Error(t, err)
	t.Logf("the caller's call: %v; the service got %d calls; the API got %d requests", err, srv.Count(grpctest.Get), apiCalls.Load())
	assert.LessOrEqual(t, apiCalls.Load(), int64(4), "retries at one layer: the API gets the service's 4 attempts, not 4 x 4")
}
