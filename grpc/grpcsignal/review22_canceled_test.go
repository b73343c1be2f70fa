package grpcsignal_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/grpc/grpcclient"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/retrysignal"
)

type review22Canceling struct {
	grpc_health_v1.UnimplementedHealthServer
	n atomic.Int64
}

// Check answers CANCELED, as a gRPC dependency does when a proxy in front
// of it resets the stream with CANCEL (grpc-go maps RST_STREAM CANCEL to
// codes.Canceled), or a server whose handler returns ctx.Err() on its own
// cancellation: the caller did not cancel.
func (s *review22Canceling) Check(context.Context, *grpc_health_v1.HealthCheckRequest) (*grpc_health_v1.HealthCheckResponse, error) {
	s.n.Add(1)
	return nil, status.Error(codes.Canceled, "stream terminated by RST_STREAM with error code: CANCEL")
}

// retrysignal.Status: "503 when ... the caller went away", "the
// dependency's own status when it answered with a 4xx or 5xx (... a gRPC
// dependency's code as the HTTP status that stands for it ...)"; the
// change: so that a status "keeps its meaning and its class". A gRPC
// dependency whose every call fails with a CANCELED that the service's
// caller did not cause: grpcclient.Error.HTTPStatus makes it 499 (a
// client's status: "the client closed the request"), which the caller's
// httpclient classes as its own fault: its breaker never opens, however
// long the dependency fails, and no breaker of the chain counts it (the
// service's own grpcclient takes CANCELED as its caller's). Before
// HTTPStatus, Status answered 503 for it.
func TestReview22ADependencysCanceledIsAnsweredAsTheCallersFault(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	gs := grpc.NewServer()
	dep := &review22Canceling{}
	grpc_health_v1.RegisterHealthServer(gs, dep)
	go func() { _ = gs.Serve(lis) }()
	defer gs.Stop()

	ic := grpcclient.New()
	cc, err := grpc.NewClient(lis.Addr().String(), append(ic.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	require.NoError(t, err)
	defer cc.Close()
	health := grpc_health_v1.NewHealthClient(cc)

	var statuses []int
	svc := httptest.NewServer(retrysignal.Handler(func(w http.ResponseWriter, r *http.Request) error {
		_, err := health.Check(r.Context(), &grpc_health_v1.HealthCheckRequest{})
		if err != nil {
			return err
		}
		_, _ = w.Write([]byte("{}"))
		return nil
	}))
	defer svc.Close()

	cb := breaker.New("review22-upstream", breaker.ConsecutiveFailures(5), breaker.OpenTimeout(time.Minute))
	up := httpclient.New(httpclient.WithPipeline(pipeline.New(pipeline.WithBreaker(cb), pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(time.Millisecond))))))
	for range 10 {
		err := up.GetJSON(context.Background(), svc.URL, nil)
		var se *httpclient.StatusError
		if errors.As(err, &se) {
			statuses = append(statuses, se.StatusCode)
		}
	}
	t.Logf("statuses the caller saw: %v; dependency called %d times; caller's breaker %v", statuses, dep.n.Load(), cb.State())
	assert.NotContains(t, statuses, 499, "a dependency's failure answered with a client's status")
	assert.True(t, errors.Is(up.GetJSON(context.Background(), svc.URL, nil), breaker.ErrOpen),
		"10 failures in a row of a dependency that fails every call: the caller's breaker (5 in a row) does not open")
}

// retrysignal.Status: "500 when the request this service made was at
// fault". A request over grpc-go's MaxCallSendMsgSize is this service's
// own fault, never sent (grpcclient: class rejected, "neither retried nor
// counted"): grpcclient.Error.HTTPStatus makes its client-made
// RESOURCE_EXHAUSTED a 429 Too Many Requests, an overload's status, which
// the caller's httpclient takes as transient, its throttle as a refusal
// by an overloaded dependency. Before HTTPStatus, Status answered 503.
func TestReview22AnOversizedRequestOfThisServiceIsAnsweredAs429(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	gs := grpc.NewServer()
	dep := &review22Canceling{}
	grpc_health_v1.RegisterHealthServer(gs, dep)
	go func() { _ = gs.Serve(lis) }()
	defer gs.Stop()

	ic := grpcclient.New()
	cc, err := grpc.NewClient(lis.Addr().String(), append(ic.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(16)))...)
	require.NoError(t, err)
	defer cc.Close()
	_, err = grpc_health_v1.NewHealthClient(cc).Check(context.Background(), &grpc_health_v1.HealthCheckRequest{Service: "a service name longer than sixteen bytes"})
	require.Error(t, err)
	t.Logf("error: %v; Status: %d", err, retrysignal.Status(err))
	require.Zero(t, dep.n.Load(), "never sent")
	assert.Equal(t, http.StatusInternalServerError, retrysignal.Status(err), "the request this service made was at fault")
}
