package grpcclient_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/resiliencekit/resiliencekit/grpc/grpcclient"
	"github.com/resiliencekit/resiliencekit/grpc/grpcsignal"
	"github.com/resiliencekit/resiliencekit/grpc/grpctest"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/pipeline"
)

// finishes counts the calls of a grpc.OnFinish function and keeps the
// last error.
type finishes struct {
	n   atomic.Int64
	mu  sync.Mutex
	err error
}

func (f *finishes) option() grpc.CallOption {
	return grpc.OnFinish(func(err error) {
		f.n.Add(1)
		f.mu.Lock()
		f.err = err
		f.mu.Unlock()
	})
}

func (f *finishes) code() codes.Code {
	f.mu.Lock()
	defer f.mu.Unlock()
	return status.Code(f.err)
}

// TestOnFinishRunsOncePerCall: grpc.OnFinish is the call's, not an
// attempt's, as with grpc-go's own retry: once, with the call's outcome,
// before the caller sees the call's end, for unary calls and streams,
// retried, successful or not; and once for a call that panics.
func TestOnFinishRunsOncePerCall(t *testing.T) {
	srv := start(t)
	client, _ := dial(t, srv, grpcclient.WithPipeline(fastPipeline()))
	for _, tc := range []struct {
		name   string
		method string
		fault  grpctest.Fault
		call   func(grpc.CallOption) error
		code   codes.Code
	}{
		{name: "unary, retried twice", method: grpctest.Get, fault: grpctest.Fault{Code: codes.Unavailable, Calls: 2},
			call: func(o grpc.CallOption) error { _, err := client.Get(t.Context(), "a", o); return err }},
		{name: "unary, failing", method: grpctest.Get, fault: grpctest.Fault{Code: codes.NotFound}, code: codes.NotFound,
			call: func(o grpc.CallOption) error { _, err := client.Get(t.Context(), "a", o); return err }},
		{name: "server stream, retried twice", method: grpctest.List, fault: grpctest.Fault{Code: codes.Unavailable, Calls: 2},
			call: func(o grpc.CallOption) error { _, err := client.List(t.Context(), "a", o); return err }},
		{name: "client stream, retried", method: grpctest.Upload, fault: grpctest.Fault{Code: codes.Unavailable, Calls: 1},
			call: func(o grpc.CallOption) error { _, err := client.Upload(t.Context(), []string{"a", "b"}, o); return err }},
		{name: "stream, failing after retries", method: grpctest.List, fault: grpctest.Fault{Code: codes.Unavailable}, code: codes.Unavailable,
			call: func(o grpc.CallOption) error { _, err := client.List(t.Context(), "a", o); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for range 10 {
				srv.Reset()
				srv.SetFault(tc.method, tc.fault)
				var f finishes
				err := tc.call(f.option())
				assert.Equal(t, tc.code, status.Code(err))
				assert.EqualValues(t, 1, f.n.Load(), "before the caller sees the end of the call, as grpc-go does")
				time.Sleep(5 * time.Millisecond) // time for a second call, if any
				assert.EqualValues(t, 1, f.n.Load(), "once per call")
				assert.Equal(t, tc.code, f.code(), "with the call's outcome")
			}
		})
	}
}

// TestForwardedPreviousAttemptsIsReplaced: a grpc-previous-rpc-attempts
// forwarded from upstream is replaced by this hop's count.
func TestForwardedPreviousAttemptsIsReplaced(t *testing.T) {
	srv := start(t)
	client, _ := dial(t, srv, grpcclient.WithPipeline(fastPipeline()))
	srv.SetFault(grpctest.Get, grpctest.Fault{Code: codes.Unavailable, Calls: 1})
	ctx := metadata.NewOutgoingContext(t.Context(), metadata.Pairs(grpcsignal.PreviousAttemptsKey, "3"))
	_, err := client.Get(ctx, "a")
	require.NoError(t, err)
	calls := srv.Calls(grpctest.Get)
	require.Len(t, calls, 2)
	assert.Empty(t, previous(calls[0]), "this hop's first attempt")
	assert.Equal(t, []string{"1"}, previous(calls[1]))
}

// TestNonIdempotentStreamIsTriedOnceEvenWithAKey: a server deduplicates
// unary calls only, so a stream of a method that is not idempotent is not
// retried, whatever its key.
func TestNonIdempotentStreamIsTriedOnceEvenWithAKey(t *testing.T) {
	cc, err := grpctest.Dial("127.0.0.1:1")
	require.NoError(t, err)
	defer cc.Close()
	for _, ic := range []*grpcclient.Interceptor{
		grpcclient.New(grpcclient.WithPipeline(fastPipeline()), grpcclient.AutoIdempotencyKey()),
		grpcclient.New(grpcclient.WithPipeline(fastPipeline())),
	} {
		var opened atomic.Int64
		streamer := func(context.Context, *grpc.StreamDesc, *grpc.ClientConn, string, ...grpc.CallOption) (grpc.ClientStream, error) {
			opened.Add(1)
			return nil, status.Error(codes.Unavailable, "down")
		}
		_, err := ic.Stream(t.Context(), &grpc.StreamDesc{ClientStreams: true}, cc, "/shop.Orders/Import", streamer,
			grpcclient.IdempotencyKey("import-1"))
		assert.Equal(t, codes.Unavailable, status.Code(err))
		assert.EqualValues(t, 1, opened.Load())
	}
}

// TestStreamContextNeverWaits: between attempts, a stream's Context is
// the call's, at once; it does not wait out the retry's backoff.
func TestStreamContextNeverWaits(t *testing.T) {
	srv := start(t)
	_, cc := dial(t, srv, grpcclient.WithPipeline(fastPipeline()))
	srv.SetFault(grpctest.List, grpctest.Fault{Code: codes.Unavailable, Calls: 1, Pushback: "300"})
	cs, err := cc.NewStream(t.Context(), grpctest.ListDesc, grpctest.List)
	require.NoError(t, err)
	require.NoError(t, cs.SendMsg(wrapperspb.String("a")))
	require.NoError(t, cs.CloseSend())
	time.Sleep(100 * time.Millisecond) // the first attempt has failed: the retry waits 300 ms
	start := time.Now()
	ctx := cs.Context()
	assert.Less(t, time.Since(start), 50*time.Millisecond)
	assert.NotNil(t, ctx)
	n := 0
	for m := new(wrapperspb.StringValue); cs.RecvMsg(m) == nil; n++ {
	}
	assert.Equal(t, 3, n, "the retry goes on")
	assert.Equal(t, 2, srv.Count(grpctest.List))
}

// TestHedgedUnaryCalls: through a pipeline that hedges, each attempt of a
// unary call decodes into its own reply and the winner's is the caller's;
// header, trailer and OnFinish are the winner's and the call's, with many
// calls at once (run with -race).
func TestHedgedUnaryCalls(t *testing.T) {
	srv := start(t)
	p := pipeline.New(pipeline.WithRetry(fastRetry(3)), pipeline.WithHedging(hedge.New(hedge.Delay(20*time.Millisecond))))
	client, _ := dial(t, srv, grpcclient.WithPipeline(p))
	srv.SetFault(grpctest.Get, grpctest.Fault{Code: codes.OK, Delay: 500 * time.Millisecond, Calls: 1})
	var f finishes
	var header, trailer metadata.MD
	start := time.Now()
	got, err := client.Get(t.Context(), "a", grpc.Header(&header), grpc.Trailer(&trailer), f.option())
	require.NoError(t, err)
	assert.Equal(t, "get:a", got)
	assert.Less(t, time.Since(start), 300*time.Millisecond, "the hedge answered, not the slow first attempt")
	calls := srv.Calls(grpctest.Get)
	require.Len(t, calls, 2)
	assert.Equal(t, []string{"1"}, previous(calls[1]), "a hedge counts the attempts before it")
	assert.NotNil(t, header, "the winner's header")
	assert.EqualValues(t, 1, f.n.Load())

	srv.Reset()
	srv.SetFault(grpctest.Get, grpctest.Fault{Code: codes.OK, Delay: 30 * time.Millisecond})
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Go(func() {
			in := string(rune('a' + i%26))
			got, err := client.Get(t.Context(), in)
			assert.NoError(t, err)
			assert.Equal(t, "get:"+in, got)
		})
	}
	wg.Wait()
}

// TestHedgingPipelineDoesNotHedgeStreams: a stream's attempts share the
// stream, so a pipeline that hedges runs them one after another.
func TestHedgingPipelineDoesNotHedgeStreams(t *testing.T) {
	srv := start(t)
	p := pipeline.New(pipeline.WithRetry(fastRetry(3)), pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond))))
	client, _ := dial(t, srv, grpcclient.WithPipeline(p))
	srv.SetFault(grpctest.List, grpctest.Fault{Code: codes.OK, Delay: 100 * time.Millisecond})
	got, err := client.List(t.Context(), "a")
	require.NoError(t, err)
	assert.Equal(t, []string{"a-0", "a-1", "a-2"}, got)
	srv.SetFault(grpctest.Upload, grpctest.Fault{Code: codes.OK, Delay: 100 * time.Millisecond})
	_, err = client.Upload(t.Context(), []string{"a", "b"})
	require.NoError(t, err)
	assert.Equal(t, 1, srv.Count(grpctest.List))
	assert.Equal(t, 1, srv.Count(grpctest.Upload))
}

func TestOnFinishRunsOnceForAPanic(t *testing.T) {
	cc, err := grpctest.Dial("127.0.0.1:1")
	require.NoError(t, err)
	defer cc.Close()
	panicking := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { panic("boom") }
	for name, p := range map[string]*pipeline.Pipeline{
		"sequential": fastPipeline(),
		"hedged":     pipeline.New(pipeline.WithRetry(fastRetry(3)), pipeline.WithHedging(hedge.New(hedge.Delay(time.Millisecond)))),
	} {
		var f finishes
		assert.PanicsWithValue(t, "boom", func() {
			_ = grpcclient.New(grpcclient.WithPipeline(p)).Unary(t.Context(), grpctest.Get, wrapperspb.String("a"),
				new(wrapperspb.StringValue), cc, panicking, f.option())
		}, name)
		assert.EqualValues(t, 1, f.n.Load(), name)
		assert.Equal(t, codes.Unknown, f.code(), name)
	}
}

// TestHedgedCallEndsWithItsAttempts: a hedged unary call returns once its
// losing attempts have ended (canceled), so that nothing below the
// interceptor uses the caller's request or options after it; the caller's
// grpc.Peer is the winner's.
func TestHedgedCallEndsWithItsAttempts(t *testing.T) {
	srv := start(t)
	p := pipeline.New(pipeline.WithRetry(fastRetry(3)), pipeline.WithHedging(hedge.New(hedge.Delay(20*time.Millisecond))))
	var running atomic.Int64
	below := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		running.Add(1)
		defer running.Add(-1)
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	cc, err := grpctest.Dial(srv.Addr, append(grpcclient.New(grpcclient.WithPipeline(p)).DialOptions(),
		grpc.WithChainUnaryInterceptor(below))...)
	require.NoError(t, err)
	defer cc.Close()
	for range 20 {
		srv.Reset()
		srv.SetFault(grpctest.Get, grpctest.Fault{Code: codes.OK, Delay: 200 * time.Millisecond, Calls: 1})
		var pr peer.Peer
		out := new(wrapperspb.StringValue)
		require.NoError(t, cc.Invoke(t.Context(), grpctest.Get, wrapperspb.String("a"), out, grpc.Peer(&pr)))
		assert.Equal(t, "get:a", out.GetValue())
		assert.Zero(t, running.Load(), "no attempt outlives the call")
		require.NotNil(t, pr.Addr)
		assert.Equal(t, srv.Addr, pr.Addr.String(), "the winner's peer")
	}
}
