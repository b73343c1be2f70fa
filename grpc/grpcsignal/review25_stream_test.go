package grpcsignal_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/resiliencekit/resiliencekit/grpc/grpcclient"
	"github.com/resiliencekit/resiliencekit/grpc/grpcsignal"
	"github.com/resiliencekit/resiliencekit/grpc/grpctest"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

func r25Conn(t *testing.T, addr string, opts ...grpcclient.Option) *grpc.ClientConn {
	ic := grpcclient.New(append(opts, grpcclient.WithPipeline(pipeline.New(
		pipeline.WithTimeBudget(5*time.Second),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond))),
	)))...)
	conn, err := grpc.NewClient(addr, append(ic.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return conn
}

// A -> B -> C, all gRPC through grpcclient, B's server with grpcsignal's
// interceptor. C's server stream (List) breaks once, UNAVAILABLE after its
// first message (C restarting): B's client cannot retry a stream that has
// answered, so nobody below retried. B answers its caller A's unary Get
// with the error. A plain chain retries at A (Get is NO_SIDE_EFFECTS) and
// completes; here B's interceptor takes the one attempt's terminal class
// as "retried below" and pushes back -1: A gives up.
func TestReview25_StreamBrokenOnceTerminalSignalFailsCaller(t *testing.T) {
	c, err := grpctest.Start()
	require.NoError(t, err)
	defer c.Close()
	c.SetFault(grpctest.List, grpctest.Fault{Code: codes.Unavailable, Calls: 1, After: 1})
	toC := grpctest.NewClient(r25Conn(t, c.Addr))

	bHandler := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if info.FullMethod != grpctest.Get {
			return handler(ctx, req)
		}
		items, err := toC.List(ctx, "x")
		if err != nil {
			return nil, err
		}
		_ = items
		return handler(ctx, req) // answer as the echo service does
	}
	b, err := grpctest.Start(grpc.ChainUnaryInterceptor(grpcsignal.UnaryServerInterceptor, bHandler))
	require.NoError(t, err)
	defer b.Close()

	got, err := grpctest.NewClient(r25Conn(t, b.Addr)).Get(context.Background(), "k")
	t.Logf("C.List calls %d, B.Get calls %d, err %v", c.Count(grpctest.List), b.Count(grpctest.Get)+0, err)
	assert.NoError(t, err, "a plain chain completes on A's retry; code %v msg %q", status.Code(err), status.Convert(err).Message())
	assert.True(t, strings.HasSuffix(got, "k"))
}

// The same with a client stream (Upload) whose messages outgrew B's replay
// buffer: the error is resilience.Unrepeatable, "a failure that a retry
// might have fixed" but that B cannot repeat. A can: it has its request.
// B's interceptor answers it as retried below (pushback -1), and A, which
// a plain chain would have let retry, gives up.
func TestReview25_UnrepeatableUploadSignalFailsCaller(t *testing.T) {
	c, err := grpctest.Start()
	require.NoError(t, err)
	defer c.Close()
	c.SetFault(grpctest.Upload, grpctest.Fault{Code: codes.Unavailable, Calls: 1, After: 3})
	toC := grpctest.NewClient(r25Conn(t, c.Addr, grpcclient.MaxReplayBuffer(8)))

	bHandler := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if info.FullMethod != grpctest.Get {
			return handler(ctx, req)
		}
		if _, err := toC.Upload(ctx, []string{"aaaaaaaa", "bbbbbbbb", "cccccccc", "dddddddd"}); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
	b, err := grpctest.Start(grpc.ChainUnaryInterceptor(grpcsignal.UnaryServerInterceptor, bHandler))
	require.NoError(t, err)
	defer b.Close()

	got, err := grpctest.NewClient(r25Conn(t, b.Addr)).Get(context.Background(), "k")
	t.Logf("C.Upload calls %d, B.Get calls %d, err %v", c.Count(grpctest.Upload), b.Count(grpctest.Get), err)
	assert.NoError(t, err, "a plain chain completes on A's retry; code %v msg %q", status.Code(err), status.Convert(err).Message())
	assert.True(t, strings.HasSuffix(got, "k"))
}
