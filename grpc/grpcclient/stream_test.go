package grpcclient_test

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/resiliencekit/resiliencekit/grpc/grpcclient"
	"github.com/resiliencekit/resiliencekit/grpc/grpctest"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// TestStreamIsRetriedOnlyUncommitted: a server or bidi stream that fails
// before its first answer is retried, its request replayed; one that fails
// after it is not.
func TestStreamIsRetriedOnlyUncommitted(t *testing.T) {
	for _, tc := range []struct {
		name   string
		method string
		after  int
		calls  int
		got    []string
		code   codes.Code
	}{
		{name: "server stream failing before its first message: retried", method: grpctest.List, after: 0, calls: 2, got: []string{"l-0", "l-1", "l-2"}},
		{name: "server stream failing after its first message: not retried", method: grpctest.List, after: 1, calls: 1, got: []string{"l-0"}, code: codes.Unavailable},
		{name: "bidi stream failing before answering: retried", method: grpctest.Chat, after: 0, calls: 2, got: []string{"l", "m"}},
		{name: "bidi stream failing after answering: not retried", method: grpctest.Chat, after: 1, calls: 1, got: []string{"l"}, code: codes.Unavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := start(t)
			var ev events
			client, _ := dial(t, srv, grpcclient.WithPipeline(fastPipeline(pipeline.WithListener(&ev))))
			srv.SetFault(tc.method, grpctest.Fault{Code: codes.Unavailable, After: tc.after, Calls: 1})
			var got []string
			var err error
			if tc.method == grpctest.List {
				got, err = client.List(t.Context(), "l")
			} else {
				got, err = client.Chat(t.Context(), []string{"l", "m"})
			}
			assert.Equal(t, tc.got, got)
			assert.Equal(t, tc.code, status.Code(err))
			calls := srv.Calls(tc.method)
			require.Len(t, calls, tc.calls)
			if tc.calls == 2 {
				assert.Equal(t, []string{"1"}, previous(calls[1]))
				assert.Equal(t, "l", calls[1].Received[0], "the request replayed")
			}
			assert.Equal(t, tc.calls, ev.count(resilience.EventAttempt))
		})
	}
}

func TestClientStreamIsReplayedIdentically(t *testing.T) {
	srv := start(t)
	client, _ := dial(t, srv, grpcclient.WithPipeline(fastPipeline()))
	srv.SetFault(grpctest.Upload, grpctest.Fault{Code: codes.Unavailable, After: 2, Calls: 2})
	sent := []string{"a", "b", "c", "d"}
	got, err := client.Upload(t.Context(), sent)
	require.NoError(t, err)
	assert.Equal(t, "a,b,c,d", got)
	calls := srv.Calls(grpctest.Upload)
	require.Len(t, calls, 3)
	assert.Equal(t, []string{"a", "b"}, calls[0].Received)
	assert.Equal(t, []string{"a", "b"}, calls[1].Received)
	assert.Equal(t, sent, calls[2].Received, "the same messages, in the same order")
}

func TestClientStreamReplaysCopiesOfReusedMessages(t *testing.T) {
	srv := start(t)
	_, cc := dial(t, srv, grpcclient.WithPipeline(fastPipeline()))
	srv.SetFault(grpctest.Upload, grpctest.Fault{Code: codes.Unavailable, After: 3, Calls: 1})
	st, err := cc.NewStream(t.Context(), grpctest.UploadDesc, grpctest.Upload)
	require.NoError(t, err)
	m := new(wrapperspb.StringValue)
	for _, v := range []string{"a", "b", "c"} {
		m.Value = v // one message, changed after each send
		require.NoError(t, st.SendMsg(m))
	}
	require.NoError(t, st.CloseSend())
	out := new(wrapperspb.StringValue)
	require.NoError(t, st.RecvMsg(out))
	assert.Equal(t, "a,b,c", out.GetValue())
	assert.Equal(t, 2, srv.Count(grpctest.Upload))
}

func TestBidiStreamSendingAndReceivingAtOnce(t *testing.T) {
	srv := start(t)
	_, cc := dial(t, srv, grpcclient.WithPipeline(fastPipeline()))
	srv.SetFault(grpctest.Chat, grpctest.Fault{Code: codes.Unavailable, Delay: 50 * time.Millisecond, Calls: 2})
	st, err := cc.NewStream(t.Context(), grpctest.ChatDesc, grpctest.Chat)
	require.NoError(t, err)
	received := make(chan []string)
	go func() {
		var got []string
		for {
			m := new(wrapperspb.StringValue)
			if err := st.RecvMsg(m); err != nil {
				assert.Equal(t, io.EOF, err)
				received <- got
				return
			}
			got = append(got, m.GetValue())
		}
	}()
	for _, v := range []string{"a", "b", "c", "d", "e"} {
		require.NoError(t, st.SendMsg(wrapperspb.String(v)))
		time.Sleep(10 * time.Millisecond)
	}
	require.NoError(t, st.CloseSend())
	assert.Equal(t, []string{"a", "b", "c", "d", "e"}, <-received)
	assert.Equal(t, 3, srv.Count(grpctest.Chat))
}

func TestReplayBufferBoundCommitsTheStream(t *testing.T) {
	for _, tc := range []struct {
		name  string
		max   int
		calls int
	}{
		{name: "within the bound: retried", max: 1 << 10, calls: 2},
		{name: "past the bound: committed", max: 10, calls: 1},
		{name: "0: committed at the first message", max: 0, calls: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := start(t)
			client, _ := dial(t, srv, grpcclient.WithPipeline(fastPipeline()), grpcclient.MaxReplayBuffer(tc.max))
			srv.SetFault(grpctest.Upload, grpctest.Fault{Code: codes.Unavailable, After: 2, Calls: 1})
			got, err := client.Upload(t.Context(), []string{strings.Repeat("x", 8), "y"})
			assert.Equal(t, tc.calls, srv.Count(grpctest.Upload))
			if tc.calls == 1 {
				assert.Equal(t, codes.Unavailable, status.Code(err), "returned as it is")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, strings.Repeat("x", 8)+",y", got)
		})
	}
}

func TestStreamGivesUpWithTheCallsError(t *testing.T) {
	srv := start(t)
	client, _ := dial(t, srv, grpcclient.WithPipeline(fastPipeline()))
	srv.SetFault(grpctest.List, grpctest.Fault{Code: codes.Unavailable, Message: "down"})
	got, err := client.List(t.Context(), "l")
	assert.Empty(t, got)
	assert.Equal(t, codes.Unavailable, status.Code(err))
	assert.Equal(t, "down", status.Convert(err).Message())
	var ce *grpcclient.Error
	assert.ErrorAs(t, err, &ce)
	assert.Contains(t, err.Error(), "gave up after 3 attempts")
	assert.Equal(t, 3, srv.Count(grpctest.List))
}

func TestStreamCanceledMidBackoff(t *testing.T) {
	srv := start(t)
	_, cc := dial(t, srv, grpcclient.WithPipeline(fastPipeline()))
	srv.SetFault(grpctest.List, grpctest.Fault{Code: codes.Unavailable, Pushback: "5000"})
	ctx, cancel := context.WithCancel(t.Context())
	st, err := cc.NewStream(ctx, grpctest.ListDesc, grpctest.List)
	require.NoError(t, err)
	require.NoError(t, st.SendMsg(wrapperspb.String("l")))
	require.NoError(t, st.CloseSend())
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	err = st.RecvMsg(new(wrapperspb.StringValue))
	assert.Less(t, time.Since(start), 2*time.Second)
	assert.Equal(t, codes.Canceled, status.Code(err))
	assert.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, 1, srv.Count(grpctest.List))
}

func TestStreamHeaderWaitsThroughRetries(t *testing.T) {
	srv := start(t)
	_, cc := dial(t, srv, grpcclient.WithPipeline(fastPipeline()))
	srv.SetFault(grpctest.Chat, grpctest.Fault{Code: codes.Unavailable, Calls: 1})
	st, err := cc.NewStream(t.Context(), grpctest.ChatDesc, grpctest.Chat)
	require.NoError(t, err)
	require.NoError(t, st.SendMsg(wrapperspb.String("a")))
	md, err := st.Header()
	require.NoError(t, err)
	assert.NotNil(t, md)
	require.NoError(t, st.CloseSend())
	m := new(wrapperspb.StringValue)
	require.NoError(t, st.RecvMsg(m))
	assert.Equal(t, "a", m.GetValue())
	assert.Equal(t, io.EOF, st.RecvMsg(m))
	assert.Equal(t, 2, srv.Count(grpctest.Chat))
	assert.NotNil(t, st.Trailer())
}

func TestAbandonedStreamEndsWithItsContext(t *testing.T) {
	srv := start(t)
	_, cc := dial(t, srv, grpcclient.WithPipeline(fastPipeline()))
	srv.Items = 1000
	ctx, cancel := context.WithCancel(t.Context())
	st, err := cc.NewStream(ctx, grpctest.ListDesc, grpctest.List)
	require.NoError(t, err)
	require.NoError(t, st.SendMsg(wrapperspb.String("l")))
	require.NoError(t, st.RecvMsg(new(wrapperspb.StringValue)))
	cancel() // goleak in TestMain checks that nothing is left
}
