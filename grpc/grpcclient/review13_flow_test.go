package grpcclient_test

import (
	"context"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/resiliencekit/resiliencekit/grpc/grpcclient"
	"github.com/resiliencekit/resiliencekit/grpc/grpctest"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

func TestReview13HedgedUnary(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	srv := start(t)
	srv.SetFault(grpctest.Get, grpctest.Fault{Code: codes.OK, Delay: 400 * time.Millisecond, Calls: 1})
	p := fastPipeline(pipeline.WithHedging(hedge.New(hedge.Delay(20*time.Millisecond), hedge.MaxShare(1))))
	client, cc := dial(t, srv, grpcclient.WithPipeline(p))
	var finished atomic.Int32
	var fErr error
	var header, trailer metadata.MD
	start := time.Now()
	got, err := client.Get(t.Context(), "x", grpc.OnFinish(func(err error) { finished.Add(1); fErr = err }), grpc.Header(&header), grpc.Trailer(&trailer))
	el := time.Since(start)
	require.NoError(t, err)
	assert.Equal(t, "get:x", got)
	assert.Less(t, el, 300*time.Millisecond, "the hedge wins")
	assert.EqualValues(t, 1, finished.Load())
	assert.NoError(t, fErr)
	calls := srv.Calls(grpctest.Get)
	require.Len(t, calls, 2)
	assert.Empty(t, calls[0].Metadata.Get("grpc-previous-rpc-attempts"))
	assert.Equal(t, []string{"1"}, calls[1].Metadata.Get("grpc-previous-rpc-attempts"))
	t.Logf("elapsed %v, header %v, codes %v %v", el, header, calls[0].Code, calls[1].Code)
	cc.Close()
	srv.Close()
}

// A unary call retried twice: OnFinish once, headers 1 then 2, a forwarded
// header replaced.
func TestReview13UnaryRetriesHeaders(t *testing.T) {
	srv := start(t)
	srv.SetFault(grpctest.Get, grpctest.Fault{Code: codes.Unavailable, Calls: 2})
	client, _ := dial(t, srv, grpcclient.WithPipeline(fastPipeline()))
	var finished atomic.Int32
	ctx := metadata.AppendToOutgoingContext(t.Context(), "grpc-previous-rpc-attempts", "7")
	_, err := client.Get(ctx, "x", grpc.OnFinish(func(error) { finished.Add(1) }))
	require.NoError(t, err)
	assert.EqualValues(t, 1, finished.Load())
	calls := srv.Calls(grpctest.Get)
	require.Len(t, calls, 3)
	assert.Empty(t, calls[0].Metadata.Get("grpc-previous-rpc-attempts"))
	assert.Equal(t, []string{"1"}, calls[1].Metadata.Get("grpc-previous-rpc-attempts"))
	assert.Equal(t, []string{"2"}, calls[2].Metadata.Get("grpc-previous-rpc-attempts"))
}

// Cancel a unary call while it waits for a long pushback: it returns at
// once with CANCELED, the breaker not told.
func TestReview13CancelMidBackoffUnary(t *testing.T) {
	srv := start(t)
	srv.SetFault(grpctest.Get, grpctest.Fault{Code: codes.Unavailable, Pushback: "5000"})
	client, _ := dial(t, srv, grpcclient.WithPipeline(pipeline.New(pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.MaxDelay(10*time.Second))))))
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	_, err := client.Get(ctx, "x")
	el := time.Since(start)
	t.Logf("err %v after %v", err, el)
	assert.Equal(t, codes.Canceled, status.Code(err))
	assert.Less(t, el, time.Second)
}

// Stream cancel mid-backoff after Stream returned.
func TestReview13CancelMidBackoffStream(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	srv := start(t)
	srv.SetFault(grpctest.List, grpctest.Fault{Code: codes.Unavailable, Pushback: "5000"})
	ic := grpcclient.New(grpcclient.WithPipeline(pipeline.New(pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.MaxDelay(10*time.Second))))))
	cc, err := grpctest.Dial(srv.Addr, ic.DialOptions()...)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	var finished atomic.Int32
	st, err := cc.NewStream(ctx, grpctest.ListDesc, grpctest.List, grpc.OnFinish(func(error) { finished.Add(1) }))
	require.NoError(t, err)
	require.NoError(t, st.SendMsg(wrapperspb.String("a")))
	require.NoError(t, st.CloseSend())
	time.AfterFunc(150*time.Millisecond, cancel)
	start := time.Now()
	err = st.RecvMsg(new(wrapperspb.StringValue))
	el := time.Since(start)
	t.Logf("err %v after %v", err, el)
	assert.Equal(t, codes.Canceled, status.Code(err))
	assert.Less(t, el, time.Second)
	assert.EqualValues(t, 1, finished.Load())
	cc.Close()
	srv.Close()
}

// Server closed mid-stream after commit: error returned, OnFinish once, no
// retry, no leak.
func TestReview13ServerStopsMidStream(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	srv, err := grpctest.Start()
	require.NoError(t, err)
	srv.Items = 5
	srv.SetFault(grpctest.List, grpctest.Fault{Code: codes.OK, After: 2, Delay: 5 * time.Second})
	ev := &events{}
	ic := grpcclient.New(grpcclient.WithPipeline(fastPipeline(pipeline.WithListener(ev), pipeline.WithTimeBudget(8*time.Second))))
	cc, err := grpctest.Dial(srv.Addr, ic.DialOptions()...)
	require.NoError(t, err)
	var finished atomic.Int32
	st, err := cc.NewStream(t.Context(), grpctest.ListDesc, grpctest.List, grpc.OnFinish(func(error) { finished.Add(1) }))
	require.NoError(t, err)
	require.NoError(t, st.SendMsg(wrapperspb.String("a")))
	require.NoError(t, st.CloseSend())
	for range 2 {
		require.NoError(t, st.RecvMsg(new(wrapperspb.StringValue)))
	}
	time.AfterFunc(100*time.Millisecond, srv.Close)
	err = st.RecvMsg(new(wrapperspb.StringValue))
	t.Logf("err %v", err)
	assert.Error(t, err)
	assert.NotEqual(t, io.EOF, err)
	assert.EqualValues(t, 1, finished.Load())
	cc.Close()
}
