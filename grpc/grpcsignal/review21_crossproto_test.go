package grpcsignal_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/deadline"
	"github.com/resiliencekit/resiliencekit/grpc/grpcclient"
	"github.com/resiliencekit/resiliencekit/grpc/grpcsignal"
	"github.com/resiliencekit/resiliencekit/grpc/grpctest"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/retrysignal"
)

// review21Retry is each hop's retry: 3 attempts, 1 ms apart.
func review21Retry() pipeline.Option {
	return pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond), retrypolicy.MaxDelay(2*time.Millisecond)))
}

// review21GRPCConn dials addr through a grpcclient Interceptor on p.
func review21GRPCConn(t *testing.T, addr string, p *pipeline.Pipeline) *grpctest.Client {
	t.Helper()
	ic := grpcclient.New(grpcclient.WithPipeline(p))
	cc, err := grpctest.Dial(addr, ic.DialOptions()...)
	require.NoError(t, err)
	t.Cleanup(func() { cc.Close() })
	return grpctest.NewClient(cc)
}

// review21GRPCHop starts a gRPC server for grpctest's Echo service whose
// Get runs get, behind grpcsignal.UnaryServerInterceptor (and opts).
func review21GRPCHop(t *testing.T, get func(ctx context.Context, in string) (string, error), opts ...grpc.ServerOption) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer(append([]grpc.ServerOption{grpc.ChainUnaryInterceptor(grpcsignal.UnaryServerInterceptor)}, opts...)...)
	srv.RegisterService(&grpc.ServiceDesc{
		ServiceName: grpctest.Service,
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{MethodName: "Get", Handler: func(_ any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			h := func(ctx context.Context, req any) (any, error) {
				out, err := get(ctx, req.(*wrapperspb.StringValue).GetValue())
				if err != nil {
					return nil, err
				}
				return wrapperspb.String(out), nil
			}
			if ic == nil {
				return h(ctx, in)
			}
			return ic(ctx, in, &grpc.UnaryServerInfo{FullMethod: grpctest.Get}, h)
		}}},
	}, struct{}{})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// A user asks for orders that do not exist: the bottom service answers
// NOT_FOUND (gRPC) or 404 (HTTP), the caller's own fault, never a breaker
// failure of the healthy services between. Across a protocol change, the
// middle hop's answer (retrysignal.Status, grpcsignal.Code: "500/INTERNAL
// when the request this service made was at fault") turns it into a
// terminal failure: five lookups of missing ids open the top caller's
// breaker, and the next call, for an order that exists, on a chain where
// every service is healthy, fails.
//
// HTTP A -> HTTP B -> gRPC C.
func TestReview21NotFoundOverGRPCOpensHTTPCallersBreaker(t *testing.T) {
	c, err := grpctest.Start()
	require.NoError(t, err)
	defer c.Close()
	c.SetFault(grpctest.Get, grpctest.Fault{Code: codes.NotFound, Message: "no such order", Calls: 5})
	toC := review21GRPCConn(t, c.Addr, pipeline.New(review21Retry()))

	b := httptest.NewServer(deadline.Middleware(retrysignal.Middleware(retrysignal.Handler(func(w http.ResponseWriter, r *http.Request) error {
		out, err := toC.Get(r.Context(), r.URL.Query().Get("id"))
		if err != nil {
			return err
		}
		_, _ = io.WriteString(w, `"`+out+`"`)
		return nil
	}))))
	defer b.Close()

	brk := breaker.New("B") // the defaults: opens after 5 failures in a row
	a := httpclient.New(httpclient.WithPipeline(pipeline.New(pipeline.WithBreaker(brk), review21Retry())))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range 5 {
		var out string
		err := a.GetJSON(ctx, b.URL+"/?id=missing", &out)
		require.Error(t, err)
		var se *httpclient.StatusError
		require.True(t, errors.As(err, &se))
		if i == 0 {
			t.Logf("A sees B's answer to a missing id as %d (class %v)", se.StatusCode, resilience.Classify(err))
		}
	}
	t.Logf("A's breaker after 5 missing ids: %v, counts %+v", brk.State(), brk.Counts())
	var out string
	err = a.GetJSON(ctx, b.URL+"/?id=42", &out)
	assert.NoError(t, err, "every service is healthy; the only errors were the user's own (missing ids)")
	assert.Equal(t, "get:42", out)
}

// The same through gRPC A -> gRPC B (grpcsignal.UnaryServerInterceptor)
// -> HTTP C: C's 404 comes up as INTERNAL, terminal at A.
func TestReview21NotFoundOverHTTPOpensGRPCCallersBreaker(t *testing.T) {
	var cCalls atomic.Int64
	c := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if cCalls.Add(1) <= 5 {
			http.Error(w, "no such order", http.StatusNotFound)
			return
		}
		_, _ = io.WriteString(w, `"found"`)
	}))
	defer c.Close()
	toC := httpclient.New(httpclient.WithPipeline(pipeline.New(review21Retry())))
	bAddr := review21GRPCHop(t, func(ctx context.Context, in string) (string, error) {
		var out string
		if err := toC.GetJSON(ctx, c.URL+"/"+in, &out); err != nil {
			return "", err
		}
		return out, nil
	})

	brk := breaker.New("B")
	a := review21GRPCConn(t, bAddr, pipeline.New(pipeline.WithBreaker(brk), review21Retry()))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range 5 {
		_, err := a.Get(ctx, "missing")
		require.Error(t, err)
		if i == 0 {
			t.Logf("A sees B's answer to a missing id as %v (class %v)", status.Code(err), resilience.Classify(err))
		}
	}
	t.Logf("A's breaker after 5 missing ids: %v, counts %+v", brk.State(), brk.Counts())
	out, err := a.Get(ctx, "42")
	assert.NoError(t, err, "every service is healthy; the only errors were the user's own (missing ids)")
	assert.Equal(t, "found", out)
}

// Control: without the protocol change the permanent answer stays
// permanent and the breaker stays closed (gRPC A -> gRPC B -> gRPC C).
func TestReview21NotFoundGRPCOnlyHolds(t *testing.T) {
	c, err := grpctest.Start()
	require.NoError(t, err)
	defer c.Close()
	c.SetFault(grpctest.Get, grpctest.Fault{Code: codes.NotFound, Calls: 5})
	toC := review21GRPCConn(t, c.Addr, pipeline.New(review21Retry()))
	bAddr := review21GRPCHop(t, func(ctx context.Context, in string) (string, error) { return toC.Get(ctx, in) })

	brk := breaker.New("B")
	a := review21GRPCConn(t, bAddr, pipeline.New(pipeline.WithBreaker(brk), review21Retry()))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range 5 {
		_, err := a.Get(ctx, "missing")
		require.Equal(t, codes.NotFound, status.Code(err))
	}
	out, err := a.Get(ctx, "42")
	require.NoError(t, err)
	assert.True(t, strings.HasSuffix(out, "42"))
	assert.Equal(t, resilience.StateClosed, brk.State())
}

// Control: HTTP A -> HTTP B -> HTTP C keeps C's 404 (retrysignal.Status
// passes the dependency's own status): A's breaker stays closed.
func TestReview21NotFoundHTTPOnlyHolds(t *testing.T) {
	var cCalls atomic.Int64
	c := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if cCalls.Add(1) <= 5 {
			http.Error(w, "no such order", http.StatusNotFound)
			return
		}
		_, _ = io.WriteString(w, `"found"`)
	}))
	defer c.Close()
	toC := httpclient.New(httpclient.WithPipeline(pipeline.New(review21Retry())))
	b := httptest.NewServer(retrysignal.Handler(func(w http.ResponseWriter, r *http.Request) error {
		var out string
		if err := toC.GetJSON(r.Context(), c.URL, &out); err != nil {
			return err
		}
		_, _ = io.WriteString(w, `"`+out+`"`)
		return nil
	}))
	defer b.Close()
	brk := breaker.New("B")
	a := httpclient.New(httpclient.WithPipeline(pipeline.New(pipeline.WithBreaker(brk), review21Retry())))
	for range 5 {
		var out string
		require.Error(t, a.GetJSON(context.Background(), b.URL, &out))
	}
	var out string
	require.NoError(t, a.GetJSON(context.Background(), b.URL, &out))
	assert.Equal(t, "found", out)
	assert.Equal(t, resilience.StateClosed, brk.State())
}
