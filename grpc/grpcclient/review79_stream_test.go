package grpcclient_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/resiliencekit/resiliencekit/grpc/grpcclient"
	"github.com/resiliencekit/resiliencekit/grpc/grpctest"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// Upload fails after receiving 2 messages: the retry replays all, once each.
func TestReview79UploadReplayOnce(t *testing.T) {
	srv := start(t)
	c, _ := dial(t, srv, grpcclient.WithPipeline(fastPipeline()))
	srv.SetFault(grpctest.Upload, grpctest.Fault{Code: codes.Unavailable, Calls: 2, After: 2})
	ins := []string{"a", "b", "c", "d", "e"}
	got, err := c.Upload(context.Background(), ins)
	require.NoError(t, err)
	require.Equal(t, "a,b,c,d,e", got)
	calls := srv.Calls(grpctest.Upload)
	require.Len(t, calls, 3)
	require.Equal(t, []string{"a", "b"}, calls[0].Received)
	require.Equal(t, []string{"a", "b"}, calls[1].Received)
	require.Equal(t, ins, calls[2].Received)
}

// Chat fails before any echo: retried, each message echoed once, in order.
func TestReview79ChatRetriedBeforeFirstEcho(t *testing.T) {
	srv := start(t)
	c, _ := dial(t, srv, grpcclient.WithPipeline(fastPipeline()))
	srv.SetFault(grpctest.Chat, grpctest.Fault{Code: codes.Unavailable, Calls: 1})
	var ins []string
	for i := range 50 {
		ins = append(ins, fmt.Sprint(i))
	}
	got, err := c.Chat(context.Background(), ins)
	require.NoError(t, err)
	require.Equal(t, ins, got)
	require.Equal(t, 2, srv.Count(grpctest.Chat))
}

// Chat fails after one echo: committed, not retried.
func TestReview79ChatCommittedNotRetried(t *testing.T) {
	srv := start(t)
	c, _ := dial(t, srv, grpcclient.WithPipeline(fastPipeline()))
	srv.SetFault(grpctest.Chat, grpctest.Fault{Code: codes.Unavailable, Calls: 1, After: 1})
	got, err := c.Chat(context.Background(), []string{"x", "y", "z"})
	require.Equal(t, codes.Unavailable, status.Code(err))
	require.Equal(t, []string{"x"}, got)
	require.Equal(t, 1, srv.Count(grpctest.Chat))
}

// Interleaved bidi: send one, receive one; the first attempt fails before
// any echo; the caller blocked in RecvMsg gets the retry's echo.
func TestReview79ChatPingPongAcrossRetry(t *testing.T) {
	srv := start(t)
	_, cc := dial(t, srv, grpcclient.WithPipeline(fastPipeline()))
	srv.SetFault(grpctest.Chat, grpctest.Fault{Code: codes.Unavailable, Calls: 1, Delay: 20 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := cc.NewStream(ctx, grpctest.ChatDesc, grpctest.Chat)
	require.NoError(t, err)
	for i := range 10 {
		require.NoError(t, st.SendMsg(wrapperspb.String(fmt.Sprint(i))))
		out := new(wrapperspb.StringValue)
		require.NoError(t, st.RecvMsg(out))
		require.Equal(t, fmt.Sprint(i), out.GetValue())
	}
	require.NoError(t, st.CloseSend())
	out := new(wrapperspb.StringValue)
	require.Equal(t, io.EOF, st.RecvMsg(out))
	require.Equal(t, io.EOF, st.RecvMsg(out)) // RecvMsg after EOF
	require.Equal(t, io.EOF, st.RecvMsg(out))
	calls := srv.Calls(grpctest.Chat)
	require.Len(t, calls, 2)
	require.Len(t, calls[1].Received, 10)
	md, err := st.Header()
	require.NoError(t, err)
	require.NotNil(t, md)
	_ = st.Trailer()
}

// A stream that outgrew the replay buffer then failed before its
// response: not retried, listener hears ErrReplayBufferFull.
func TestReview79ReplayOverflowNotRetried(t *testing.T) {
	srv := start(t)
	var ev events
	var mu sync.Mutex
	var doneErr error
	l := resilience.ListenerFunc(func(e resilience.Event) {
		ev.OnEvent(e)
		if e.Kind == resilience.EventCallDone {
			mu.Lock()
			doneErr = e.Err
			mu.Unlock()
		}
	})
	c, _ := dial(t, srv, grpcclient.WithPipeline(fastPipeline(pipeline.WithListener(l))), grpcclient.MaxReplayBuffer(10))
	srv.SetFault(grpctest.Upload, grpctest.Fault{Code: codes.Unavailable, Calls: 1, After: 5})
	_, err := c.Upload(context.Background(), []string{"aaaa", "bbbb", "cccc", "dddd", "eeee", "ffff"})
	require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
	require.Equal(t, 1, srv.Count(grpctest.Upload))
	time.Sleep(50 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	require.ErrorIs(t, doneErr, grpcclient.ErrReplayBufferFull)
}

// The caller never reads: cancels; no goroutine left (goleak in TestMain).
func TestReview79NeverReadCancel(t *testing.T) {
	srv := start(t)
	_, cc := dial(t, srv, grpcclient.WithPipeline(fastPipeline()))
	srv.Items = 1000
	for range 20 {
		ctx, cancel := context.WithCancel(context.Background())
		st, err := cc.NewStream(ctx, grpctest.ListDesc, grpctest.List)
		require.NoError(t, err)
		require.NoError(t, st.SendMsg(wrapperspb.String("x")))
		require.NoError(t, st.CloseSend())
		cancel()
	}
	for range 20 { // bidi, canceled with a message in flight, uncommitted
		srv.SetFault(grpctest.Chat, grpctest.Fault{Code: codes.Unavailable, Delay: 5 * time.Millisecond})
		ctx, cancel := context.WithCancel(context.Background())
		st, err := cc.NewStream(ctx, grpctest.ChatDesc, grpctest.Chat)
		require.NoError(t, err)
		_ = st.SendMsg(wrapperspb.String("x"))
		time.Sleep(time.Millisecond)
		cancel()
		err = st.RecvMsg(new(wrapperspb.StringValue))
		require.Equal(t, codes.Canceled, status.Code(err), "%v", err)
	}
}

// ctx canceled while the caller waits in RecvMsg between attempts.
func TestReview79CancelBetweenAttempts(t *testing.T) {
	srv := start(t)
	slow := pipeline.New(pipeline.WithRetry(fastRetry(5)))
	_ = slow
	_, cc := dial(t, srv, grpcclient.WithPipeline(fastPipeline()))
	srv.SetFault(grpctest.List, grpctest.Fault{Code: codes.Unavailable, Pushback: "300"})
	ctx, cancel := context.WithCancel(context.Background())
	st, err := cc.NewStream(ctx, grpctest.ListDesc, grpctest.List)
	require.NoError(t, err)
	require.NoError(t, st.SendMsg(wrapperspb.String("x")))
	require.NoError(t, st.CloseSend())
	go func() { time.Sleep(50 * time.Millisecond); cancel() }()
	start := time.Now()
	err = st.RecvMsg(new(wrapperspb.StringValue))
	require.Equal(t, codes.Canceled, status.Code(err), "%v", err)
	require.Less(t, time.Since(start), 250*time.Millisecond)
	require.Equal(t, codes.Canceled, status.Code(st.RecvMsg(new(wrapperspb.StringValue))))
}

// Many goroutines mixing streams and unary calls against flaky methods.
func TestReview79Race64(t *testing.T) {
	srv := start(t)
	c, cc := dial(t, srv, grpcclient.WithPipeline(pipeline.New(pipeline.WithRetry(fastRetry(8)))))
	var wg sync.WaitGroup
	errs := make(chan error, 64*20)
	for g := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				in := fmt.Sprintf("g%d-%d", g, i)
				switch (g + i) % 4 {
				case 0:
					out, err := c.Get(ctx, in)
					if err != nil || out != "get:"+in {
						errs <- fmt.Errorf("get %q %v", out, err)
					}
				case 1:
					got, err := c.Chat(ctx, []string{in, in + "b", in + "c"})
					if err != nil || strings.Join(got, "|") != in+"|"+in+"b|"+in+"c" {
						errs <- fmt.Errorf("chat %v %v", got, err)
					}
				case 2:
					got, err := c.Upload(ctx, []string{in, "2"})
					if err != nil || got != in+",2" {
						errs <- fmt.Errorf("upload %v %v", got, err)
					}
				case 3:
					st, err := cc.NewStream(ctx, grpctest.ChatDesc, grpctest.Chat)
					if err != nil {
						errs <- err
						break
					}
					var rwg sync.WaitGroup
					rwg.Add(1)
					var got []string
					var rerr error
					go func() {
						defer rwg.Done()
						for {
							m := new(wrapperspb.StringValue)
							if err := st.RecvMsg(m); err != nil {
								if err != io.EOF {
									rerr = err
								}
								return
							}
							got = append(got, m.GetValue())
						}
					}()
					for k := range 5 {
						if err := st.SendMsg(wrapperspb.String(fmt.Sprint(k))); err != nil {
							errs <- fmt.Errorf("send %v", err)
						}
					}
					_ = st.CloseSend()
					rwg.Wait()
					if rerr != nil || strings.Join(got, "") != "01234" {
						errs <- fmt.Errorf("bidi %v %v", got, rerr)
					}
				}
				cancel()
			}
		}()
	}
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(25 * time.Millisecond):
			}
			srv.SetFault(grpctest.Chat, grpctest.Fault{Code: codes.Unavailable, Calls: 1})
			srv.SetFault(grpctest.Upload, grpctest.Fault{Code: codes.Unavailable, Calls: 1, After: 1})
			srv.SetFault(grpctest.Get, grpctest.Fault{Code: codes.Unavailable, Calls: 1})
		}
	}()
	wg.Wait()
	close(stop)
	close(errs)
	var all []error
	for e := range errs {
		all = append(all, e)
	}
	require.Empty(t, all, "%d errors, first: %v", len(all), errors.Join(all[:min(5, len(all))]...))
}

var _ = grpc.EmptyCallOption{}
