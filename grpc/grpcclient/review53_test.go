package grpcclient_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/grpc/grpcclient"
	"github.com/resiliencekit/resiliencekit/grpc/grpctest"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

func review53Rig(t *testing.T, b *breaker.Breaker, dopts ...grpc.DialOption) (*grpctest.Server, *grpc.ClientConn) {
	t.Helper()
	srv, err := grpctest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	opts := []pipeline.Option{pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(time.Millisecond), retrypolicy.MaxDelay(5*time.Millisecond)))}
	if b != nil {
		opts = append(opts, pipeline.WithBreaker(b))
	}
	ic := grpcclient.New(grpcclient.WithPipeline(pipeline.New(opts...)))
	cc, err := grpctest.Dial(srv.Addr, append(ic.DialOptions(), dopts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return srv, cc
}

func review53Leak(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, goleak.IgnoreCurrent()) })
}

// A committed bidi stream whose server dies mid-stream: error back, no replay.
func TestReview53_CommittedChatServerDies(t *testing.T) {
	srv, err := grpctest.Start()
	if err != nil {
		t.Fatal(err)
	}
	b := breaker.New("r53", breaker.ConsecutiveFailures(100))
	ic := grpcclient.New(grpcclient.WithPipeline(pipeline.New(pipeline.WithBreaker(b), pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(time.Millisecond))))))
	cc, err := grpctest.Dial(srv.Addr, ic.DialOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := cc.NewStream(ctx, grpctest.ChatDesc, grpctest.Chat)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SendMsg(wrapperspb.String("a")); err != nil {
		t.Fatal(err)
	}
	got := new(wrapperspb.StringValue)
	if err := st.RecvMsg(got); err != nil {
		t.Fatal(err)
	}
	srv.Close()
	_ = st.SendMsg(wrapperspb.String("b"))
	err = st.RecvMsg(got)
	if err == nil {
		t.Fatal("no error after server died")
	}
	if n := srv.Count(grpctest.Chat); n != 1 {
		t.Fatalf("server saw %d calls, want 1 (no replay after commit)", n)
	}
	deadline := time.Now().Add(2 * time.Second)
	for b.Counts().TotalFailures != 1 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if c := b.Counts(); c.TotalFailures != 1 {
		t.Fatalf("breaker counts %+v, want 1 failure", c)
	}
}

// A response over MaxCallRecvMsgSize on a server stream, a request over
// MaxCallSendMsgSize on a client stream, a bad metadata key: never counted.
func TestReview53_LocalErrorsNotCounted(t *testing.T) {
	review53Leak(t)
	b := breaker.New("r53local", breaker.ConsecutiveFailures(1))
	srv, cc := review53Rig(t, b, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<10), grpc.MaxCallSendMsgSize(1<<20)))
	c := grpctest.NewClient(cc)
	ctx := context.Background()
	big := strings.Repeat("x", 4<<10)

	// List echoes the request: the first reply is over the recv limit.
	_, err := c.List(ctx, big)
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("List: %v", err)
	}
	// Get: reply over the recv limit.
	_, err = c.Get(ctx, big)
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("Get: %v", err)
	}
	// Upload: a message over the send limit.
	_, err = c.Upload(ctx, []string{"a", strings.Repeat("y", 2<<20)})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("Upload: %v", err)
	}
	// Chat: a message over the send limit after commit.
	st, err := cc.NewStream(ctx, grpctest.ChatDesc, grpctest.Chat)
	if err != nil {
		t.Fatal(err)
	}
	_ = st.SendMsg(wrapperspb.String("a"))
	_ = st.RecvMsg(new(wrapperspb.StringValue))
	if err := st.SendMsg(wrapperspb.String(strings.Repeat("z", 2<<20))); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("Chat send: %v", err)
	}
	for st.RecvMsg(new(wrapperspb.StringValue)) == nil {
	}
	// Bad metadata key on a stream and a unary call.
	bad := metadata.NewOutgoingContext(ctx, metadata.MD{"Bad Key": []string{"v"}})
	if _, err := c.Chat(bad, []string{"a"}); status.Code(err) != codes.Internal {
		t.Fatalf("Chat bad md: %v", err)
	}
	if _, err := c.Get(bad, "a"); status.Code(err) != codes.Internal {
		t.Fatalf("Get bad md: %v", err)
	}
	badv := metadata.NewOutgoingContext(ctx, metadata.MD{"k": []string{"bad\x01value"}})
	if _, err := c.Get(badv, "a"); err == nil {
		t.Logf("Get bad md value: no error")
	} else if status.Code(err) != codes.Internal {
		t.Logf("Get bad md value: %v", err)
	}
	time.Sleep(50 * time.Millisecond)
	if st := b.State(); st.String() != "closed" {
		t.Fatalf("breaker %v, counts %+v", st, b.Counts())
	}
	if _, err := c.Get(ctx, "ok"); err != nil {
		t.Fatalf("healthy call failed: %v", err)
	}
	_ = srv
}

// Stream retries with replay while uncommitted; the retry sees every message in order.
func TestReview53_UploadReplay(t *testing.T) {
	review53Leak(t)
	srv, cc := review53Rig(t, nil)
	c := grpctest.NewClient(cc)
	srv.SetFault(grpctest.Upload, grpctest.Fault{Code: codes.Unavailable, Calls: 2, After: 3})
	ins := []string{"a", "b", "c", "d", "e"}
	got, err := c.Upload(context.Background(), ins)
	if err != nil || got != "a,b,c,d,e" {
		t.Fatalf("got %q, %v", got, err)
	}
	calls := srv.Calls(grpctest.Upload)
	if len(calls) != 3 {
		t.Fatalf("%d calls", len(calls))
	}
	for i, cl := range calls {
		t.Logf("call %d: %v prev=%v", i, cl.Received, cl.Metadata.Get("grpc-previous-rpc-attempts"))
	}
}

// Cancel in the middle of retries and replays, at random times: every call
// returns promptly, and nothing leaks.
func TestReview53_CancelMidReplay(t *testing.T) {
	review53Leak(t)
	srv, cc := review53Rig(t, nil)
	srv.SetFault(grpctest.Upload, grpctest.Fault{Code: codes.Unavailable, After: 40})
	srv.SetFault(grpctest.Chat, grpctest.Fault{Code: codes.Unavailable, After: 30})
	var wg sync.WaitGroup
	for i := range 60 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(i%15)*time.Millisecond+time.Millisecond)
			defer cancel()
			desc, m := grpctest.UploadDesc, grpctest.Upload
			if i%2 == 1 {
				desc, m = grpctest.ChatDesc, grpctest.Chat
			}
			done := make(chan error, 1)
			go func() {
				st, err := cc.NewStream(ctx, desc, m)
				if err != nil {
					done <- err
					return
				}
				for j := range 100 {
					if err := st.SendMsg(wrapperspb.String(fmt.Sprint(j))); err != nil {
						break
					}
				}
				_ = st.CloseSend()
				var err2 error
				for {
					if err2 = st.RecvMsg(new(wrapperspb.StringValue)); err2 != nil {
						break
					}
				}
				done <- err2
			}()
			select {
			case err := <-done:
				if err == nil || err == io.EOF {
					t.Errorf("call %d: succeeded against an always-failing server: %v", i, err)
				}
			case <-time.After(5 * time.Second):
				t.Errorf("call %d hangs after its context ended", i)
			}
		}()
	}
	wg.Wait()
}

// Many goroutines, all kinds of calls, intermittent faults: all succeed.
func TestReview53_ConcurrentMixed(t *testing.T) {
	review53Leak(t)
	srv, cc := review53Rig(t, nil)
	c := grpctest.NewClient(cc)
	srv.SetFault(grpctest.Get, grpctest.Fault{Code: codes.Unavailable, Calls: 30})
	srv.SetFault(grpctest.List, grpctest.Fault{Code: codes.Unavailable, Calls: 30, After: 0})
	srv.SetFault(grpctest.Upload, grpctest.Fault{Code: codes.Unavailable, Calls: 30, After: 2})
	srv.SetFault(grpctest.Chat, grpctest.Fault{Code: codes.Unavailable, Calls: 30, After: 0})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var fails []string
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var err error
			in := fmt.Sprint(i)
			switch i % 4 {
			case 0:
				var s string
				s, err = c.Get(ctx, in)
				if err == nil && s != "get:"+in {
					err = fmt.Errorf("got %q", s)
				}
			case 1:
				_, err = c.List(ctx, in)
			case 2:
				var s string
				s, err = c.Upload(ctx, []string{in, "x", "y", "z"})
				if err == nil && s != in+",x,y,z" {
					err = fmt.Errorf("got %q", s)
				}
			case 3:
				var out []string
				out, err = c.Chat(ctx, []string{in, "x"})
				if err == nil && strings.Join(out, ",") != in+",x" {
					err = fmt.Errorf("got %q", out)
				}
			}
			if err != nil {
				mu.Lock()
				fails = append(fails, fmt.Sprintf("%d: %v", i, err))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(fails) > 0 {
		t.Logf("%d failures; first: %v", len(fails), fails[:min(5, len(fails))])
		// 30 faults per method and 4 attempts: a failure means a call hit 4 faults in a row.
	}
}

var _ = errors.New
var _ net.Conn

func review53Dial(b *breaker.Breaker) []grpc.DialOption {
	opts := []pipeline.Option{pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(time.Millisecond), retrypolicy.MaxDelay(5*time.Millisecond)))}
	if b != nil {
		opts = append(opts, pipeline.WithBreaker(b))
	}
	return grpcclient.New(grpcclient.WithPipeline(pipeline.New(opts...))).DialOptions()
}
