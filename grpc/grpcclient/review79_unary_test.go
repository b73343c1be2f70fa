package grpcclient_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/resiliencekit/resiliencekit/grpc/grpcclient"
	"github.com/resiliencekit/resiliencekit/grpc/grpcsignal"
	"github.com/resiliencekit/resiliencekit/grpc/grpctest"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/pipeline"
)

// tagging answers with the attempt number; attempt 0 is slow.
func tagging(slow time.Duration, canceled *atomic.Int32) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		n := grpcsignal.PreviousAttempts(ctx)
		if n == 0 {
			select {
			case <-time.After(slow):
			case <-ctx.Done():
				canceled.Add(1)
				return nil, status.FromContextError(ctx.Err()).Err()
			}
		}
		resp, err := h(ctx, req)
		if err != nil {
			return nil, err
		}
		_ = grpc.SetHeader(ctx, metadata.Pairs("attempt", fmt.Sprint(n)))
		return wrapperspb.String(resp.(*wrapperspb.StringValue).GetValue() + fmt.Sprintf("#%d", n)), nil
	}
}

func hedging() *pipeline.Pipeline {
	return pipeline.New(pipeline.WithRetry(fastRetry(3)), pipeline.WithHedging(hedge.New(hedge.Delay(5*time.Millisecond), hedge.MaxShare(1))))
}

// The hedge wins; the slow first attempt is canceled; the caller's reply
// and header are the winner's and nothing writes them after the call.
func TestReview79HedgeWinnerOnly(t *testing.T) {
	var canceled atomic.Int32
	srv := start(t, grpc.UnaryInterceptor(tagging(300*time.Millisecond, &canceled)))
	_, cc := dial(t, srv, grpcclient.WithPipeline(hedging()))
	for i := range 20 {
		out := new(wrapperspb.StringValue)
		var hdr metadata.MD
		var finished atomic.Int32
		err := cc.Invoke(context.Background(), grpctest.Get, wrapperspb.String("x"), out, grpc.Header(&hdr), grpc.OnFinish(func(error) { finished.Add(1) }))
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(out.GetValue(), "get:x#"), out.GetValue())
		require.NotEqual(t, "get:x#0", out.GetValue())
		require.Equal(t, strings.TrimPrefix(out.GetValue(), "get:x#"), hdr.Get("attempt")[0])
		require.EqualValues(t, 1, finished.Load())
		snap := out.GetValue()
		time.Sleep(5 * time.Millisecond)
		require.Equal(t, snap, out.GetValue(), "round %d", i)
	}
	require.Eventually(t, func() bool { return canceled.Load() == 20 }, 2*time.Second, 10*time.Millisecond)
}

// A non-idempotent method is never hedged.
func TestReview79HedgeNotForCreate(t *testing.T) {
	var canceled atomic.Int32
	srv := start(t, grpc.UnaryInterceptor(tagging(100*time.Millisecond, &canceled)))
	c, _ := dial(t, srv, grpcclient.WithPipeline(hedging()))
	out, err := c.Create(context.Background(), "x")
	require.NoError(t, err)
	require.Equal(t, "created:x#0", out)
	require.Equal(t, 1, srv.Count(grpctest.Create))
	// With a key, it may hedge; the server gets the same key on each.
	out, err = c.Create(context.Background(), "y", grpcclient.IdempotencyKey("k1"))
	require.NoError(t, err)
	for _, call := range srv.Calls(grpctest.Create)[1:] {
		require.Equal(t, []string{"k1"}, call.Metadata.Get("idempotency-key"))
	}
}

// Caller's own errors never open a per-target breaker.
func TestReview79CallersErrorsNotCounted(t *testing.T) {
	srv := start(t)
	var k keys
	c, cc := dial(t, srv, grpcclient.WithPipeline(fastPipeline()), grpcclient.BreakerPerTarget(k.breakers(1)))
	ctx := context.Background()
	big := strings.Repeat("x", 1000)
	type tc struct {
		name string
		call func() error
	}
	cases := []tc{
		{"not proto req", func() error { return cc.Invoke(ctx, grpctest.Get, "str", new(wrapperspb.StringValue)) }},
		{"not proto reply", func() error { var s string; return cc.Invoke(ctx, grpctest.Get, wrapperspb.String("a"), &s) }},
		{"bad utf8", func() error {
			return cc.Invoke(ctx, grpctest.Get, wrapperspb.String("\xff"), new(wrapperspb.StringValue))
		}},
		{"send size", func() error { _, err := c.Get(ctx, big, grpc.MaxCallSendMsgSize(10)); return err }},
		{"recv size", func() error { _, err := c.Get(ctx, big, grpc.MaxCallRecvMsgSize(10)); return err }},
		{"unknown method", func() error {
			return cc.Invoke(ctx, "/nope.Svc/M", wrapperspb.String("a"), new(wrapperspb.StringValue))
		}},
		{"bad md", func() error {
			return cc.Invoke(metadata.AppendToOutgoingContext(ctx, "bad key", "v"), grpctest.Get, wrapperspb.String("a"), new(wrapperspb.StringValue))
		}},
		{"compressor", func() error { _, err := c.Get(ctx, "a", grpc.UseCompressor("nope")); return err }},
		{"canceled", func() error {
			cctx, cancel := context.WithCancel(ctx)
			cancel()
			_, err := c.Get(cctx, "a")
			return err
		}},
		{"stream send size", func() error { _, err := c.Upload(ctx, []string{big}, grpc.MaxCallSendMsgSize(10)); return err }},
		{"stream not proto", func() error {
			st, err := cc.NewStream(ctx, grpctest.ChatDesc, grpctest.Chat)
			if err != nil {
				return err
			}
			return st.SendMsg(42)
		}},
		{"stream recv size", func() error { _, err := c.Chat(ctx, []string{big}, grpc.MaxCallRecvMsgSize(10)); return err }},
	}
	cases = append(cases, tc{"undecodable request", func() error {
		// a request of the wrong type whose bytes the server cannot decode: the server answers INTERNAL
		return cc.Invoke(ctx, grpctest.Get, wrapperspb.Bytes([]byte("\xff")), new(wrapperspb.StringValue))
	}})
	for _, tc := range cases {
		for range 3 {
			err := tc.call()
			require.Error(t, err, tc.name)
		}
		_, err := c.Get(ctx, "ok")
		require.NoError(t, err, "after %q", tc.name)
	}
}

func TestReview79InvokerPanics(t *testing.T) {
	srv := start(t)
	var n atomic.Int32
	inner := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if n.Add(1) == 2 {
			panic("boom")
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	streamInner := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		if grpcsignal.PreviousAttempts(metadata.NewIncomingContext(ctx, func() metadata.MD { md, _ := metadata.FromOutgoingContext(ctx); return md }())) == 1 {
			panic("stream boom")
		}
		return streamer(ctx, desc, cc, method, opts...)
	}
	for _, hedged := range []bool{false, true} {
		n.Store(0)
		p := fastPipeline()
		if hedged {
			p = hedging()
		}
		cc, err := grpctest.Dial(srv.Addr, append(grpcclient.New(grpcclient.WithPipeline(p)).DialOptions(),
			grpc.WithChainUnaryInterceptor(inner), grpc.WithChainStreamInterceptor(streamInner))...)
		require.NoError(t, err)
		srv.SetFault(grpctest.Get, grpctest.Fault{Code: codes.Unavailable, Calls: 1})
		var fin atomic.Int32
		func() {
			defer func() { require.NotNil(t, recover()) }()
			_ = cc.Invoke(context.Background(), grpctest.Get, wrapperspb.String("a"), new(wrapperspb.StringValue), grpc.OnFinish(func(error) { fin.Add(1) }))
		}()
		require.EqualValues(t, 1, fin.Load())
		srv.SetFault(grpctest.Chat, grpctest.Fault{Code: codes.Unavailable, Calls: 1})
		var sfin atomic.Int32
		func() {
			defer func() { require.NotNil(t, recover()) }()
			st, err := cc.NewStream(context.Background(), grpctest.ChatDesc, grpctest.Chat, grpc.OnFinish(func(error) { sfin.Add(1) }))
			require.NoError(t, err)
			_ = st.SendMsg(wrapperspb.String("a"))
			_ = st.CloseSend()
			_ = st.RecvMsg(new(wrapperspb.StringValue))
			t.Fatal("no panic")
		}()
		require.EqualValues(t, 1, sfin.Load())
		cc.Close()
	}
	var wg sync.WaitGroup
	wg.Wait()
}
