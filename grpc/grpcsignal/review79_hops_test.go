package grpcsignal_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/resiliencekit/resiliencekit/grpc/grpcclient"
	"github.com/resiliencekit/resiliencekit/grpc/grpcsignal"
	"github.com/resiliencekit/resiliencekit/grpc/grpctest"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

func review79Pipe(budget time.Duration) *pipeline.Pipeline {
	return pipeline.New(pipeline.WithTimeBudget(budget), pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond))))
}

// A -> B -> C -> D, each hop through grpcclient; D always fails UNAVAILABLE.
func TestReview79ThreeHops(t *testing.T) {
	d, err := grpctest.Start()
	require.NoError(t, err)
	defer d.Close()
	hop := func(next string) (*grpctest.Server, *grpc.ClientConn) {
		ncc, err := grpctest.Dial(next, grpcclient.New(grpcclient.WithPipeline(review79Pipe(5*time.Second))).DialOptions()...)
		require.NoError(t, err)
		nc := grpctest.NewClient(ncc)
		fwd := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, _ grpc.UnaryHandler) (any, error) {
			return grpcsignal.UnaryServerInterceptor(ctx, req, info, func(ctx context.Context, req any) (any, error) {
				out, err := nc.Get(ctx, req.(*wrapperspb.StringValue).GetValue())
				if err != nil {
					return nil, err
				}
				return wrapperspb.String(out), nil
			})
		}
		s, err := grpctest.Start(grpc.UnaryInterceptor(fwd))
		require.NoError(t, err)
		return s, ncc
	}
	c, ccc := hop(d.Addr)
	defer c.Close()
	defer ccc.Close()
	b, bcc := hop(c.Addr)
	defer b.Close()
	defer bcc.Close()
	acc, err := grpctest.Dial(b.Addr, grpcclient.New(grpcclient.WithPipeline(review79Pipe(5*time.Second))).DialOptions()...)
	require.NoError(t, err)
	defer acc.Close()
	a := grpctest.NewClient(acc)

	// Healthy: a deadline of 400 ms reaches D a little less.
	ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
	out, err := a.Get(ctx, "x")
	cancel()
	require.NoError(t, err)
	require.Equal(t, "get:x", out)
	calls := d.Calls(grpctest.Get)
	require.Len(t, calls, 1)
	require.LessOrEqual(t, calls[0].Deadline, 400*time.Millisecond)
	require.Greater(t, calls[0].Deadline, 300*time.Millisecond)
	require.Empty(t, calls[0].Metadata.Get(grpcsignal.PreviousAttemptsKey))

	// D down: D gets 3 attempts, not 27.
	d.Reset()
	d.SetFault(grpctest.Get, grpctest.Fault{Code: codes.Unavailable})
	_, err = a.Get(context.Background(), "x")
	require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
	require.Equal(t, 3, d.Count(grpctest.Get))
	for i, call := range d.Calls(grpctest.Get) {
		require.LessOrEqual(t, len(call.Metadata.Get(grpcsignal.PreviousAttemptsKey)), 1, "call %d", i)
	}

	// D slow past A's deadline: A fails within its deadline, D not hammered.
	d.Reset()
	d.SetFault(grpctest.Get, grpctest.Fault{Code: codes.OK, Delay: time.Second})
	ctx, cancel = context.WithTimeout(context.Background(), 200*time.Millisecond)
	start := time.Now()
	_, err = a.Get(ctx, "x")
	cancel()
	require.Equal(t, codes.DeadlineExceeded, status.Code(err), "%v", err)
	require.Less(t, time.Since(start), 400*time.Millisecond)
	time.Sleep(100 * time.Millisecond)
	t.Logf("D calls with a 200 ms deadline upstream: %d", d.Count(grpctest.Get))
	require.LessOrEqual(t, d.Count(grpctest.Get), 1)
}
