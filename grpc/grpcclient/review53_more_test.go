package grpcclient_test

import (
	"context"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/grpc/grpcclient"
	"github.com/resiliencekit/resiliencekit/grpc/grpctest"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// A stream's RecvMsg into a value the codec does not take: the caller's
// own error, as it is for a unary reply; must not count.
func TestReview53_StreamRecvWrongTypeNotCounted(t *testing.T) {
	review53Leak(t)
	b := breaker.New("r53wrong", breaker.ConsecutiveFailures(1))
	_, cc := review53Rig(t, b)
	ctx := context.Background()
	st, err := cc.NewStream(ctx, grpctest.ChatDesc, grpctest.Chat)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SendMsg(wrapperspb.String("a")); err != nil {
		t.Fatal(err)
	}
	var wrong string
	err = st.RecvMsg(&wrong)
	t.Logf("RecvMsg(*string): %v", err)
	for st.RecvMsg(new(wrapperspb.StringValue)) == nil {
	}
	time.Sleep(50 * time.Millisecond)
	if _, err := grpctest.NewClient(cc).Get(ctx, "healthy"); err != nil {
		t.Fatalf("a healthy call fails after the caller's own RecvMsg type error on a stream: %v", err)
	}
}

// The unary equivalent, which the docs say is checked.
func TestReview53_UnaryRecvWrongTypeNotCounted(t *testing.T) {
	review53Leak(t)
	b := breaker.New("r53wrongu", breaker.ConsecutiveFailures(1))
	_, cc := review53Rig(t, b)
	ctx := context.Background()
	var wrongReply string
	uerr := cc.Invoke(ctx, grpctest.Get, wrapperspb.String("a"), &wrongReply)
	t.Logf("unary Invoke(reply *string): %v", uerr)
	if _, err := grpctest.NewClient(cc).Get(ctx, "healthy"); err != nil {
		t.Fatalf("healthy call: %v", err)
	}
}

// A compressor that is not registered, on a stream: the caller's; not counted.
func TestReview53_StreamBadCompressorNotCounted(t *testing.T) {
	review53Leak(t)
	b := breaker.New("r53comp", breaker.ConsecutiveFailures(1))
	_, cc := review53Rig(t, b)
	c := grpctest.NewClient(cc)
	_, err := c.Chat(context.Background(), []string{"a"}, grpc.UseCompressor("nope"))
	t.Logf("Chat: %v", err)
	_, err = c.Get(context.Background(), "a", grpc.UseCompressor("nope"))
	t.Logf("Get: %v", err)
	_, err = c.Upload(context.Background(), []string{"a", string([]byte{0xff})})
	t.Logf("Upload bad utf8: %v", err)
	if s := b.State(); s.String() != "closed" {
		t.Fatalf("breaker %v", s)
	}
}

// OK streams with no message at all (trailers-only): succeed as plain.
func TestReview53_TrailersOnlyOK(t *testing.T) {
	review53Leak(t)
	srv, cc := review53Rig(t, nil)
	c := grpctest.NewClient(cc)
	out, err := c.Chat(context.Background(), nil)
	if err != nil || len(out) != 0 {
		t.Fatalf("Chat: %v %v", out, err)
	}
	srv.Items = 0
	l, err := c.List(context.Background(), "x")
	if err != nil || len(l) != 0 {
		t.Fatalf("List: %v %v", l, err)
	}
}

// Pushback that forbids retry, on a stream: one attempt. A pushback delay: honoured.
func TestReview53_StreamPushback(t *testing.T) {
	review53Leak(t)
	srv, cc := review53Rig(t, nil)
	c := grpctest.NewClient(cc)
	srv.SetFault(grpctest.Chat, grpctest.Fault{Code: codes.Unavailable, Pushback: "-1"})
	if _, err := c.Chat(context.Background(), []string{"a"}); status.Code(err) != codes.Unavailable {
		t.Fatalf("err %v", err)
	}
	if n := srv.Count(grpctest.Chat); n != 1 {
		t.Fatalf("%d attempts, want 1", n)
	}
	srv.Reset()
	srv.SetFault(grpctest.Chat, grpctest.Fault{Code: codes.Unavailable, Pushback: "200", Calls: 1})
	start := time.Now()
	if _, err := c.Chat(context.Background(), []string{"a"}); err != nil {
		t.Fatal(err)
	}
	// retry policy MaxDelay is 5ms: the pushback is capped by it, as documented.
	t.Logf("took %v, %d attempts", time.Since(start), srv.Count(grpctest.Chat))
}

// OnFinish once per stream, under faults, cancellations and server deaths.
func TestReview53_StreamOnFinishOnce(t *testing.T) {
	review53Leak(t)
	srv, cc := review53Rig(t, nil)
	srv.SetFault(grpctest.Chat, grpctest.Fault{Code: codes.Unavailable, After: 1, Calls: 40})
	var wg sync.WaitGroup
	var calls, finished atomic.Int64
	for i := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(i%20)*time.Millisecond+time.Millisecond)
			defer cancel()
			var n atomic.Int64
			calls.Add(1)
			st, err := cc.NewStream(ctx, grpctest.ChatDesc, grpctest.Chat, grpc.OnFinish(func(error) {
				if n.Add(1) > 1 {
					t.Errorf("OnFinish twice")
				}
				finished.Add(1)
			}))
			if err != nil {
				return
			}
			for j := range 5 {
				if st.SendMsg(wrapperspb.String(string(rune('a'+j)))) != nil {
					break
				}
			}
			if i%3 == 0 {
				cancel() // abandon without reading
				return
			}
			_ = st.CloseSend()
			for st.RecvMsg(new(wrapperspb.StringValue)) == nil {
			}
		}()
	}
	wg.Wait()
	deadline := time.Now().Add(3 * time.Second)
	for finished.Load() != calls.Load() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	// NewStream failures don't call OnFinish in grpc-go either; count opened only.
	t.Logf("calls %d finished %d", calls.Load(), finished.Load())
}

// review53Proxy forwards TCP to target; kill closes every connection.
type review53Proxy struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

func newReview53Proxy(t *testing.T, target string) *review53Proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &review53Proxy{ln: ln}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			p.wg.Add(2)
			go func() { defer p.wg.Done(); io.Copy(s, c); s.Close() }()
			go func() { defer p.wg.Done(); io.Copy(c, s); c.Close() }()
		}
	}()
	t.Cleanup(func() { ln.Close(); p.kill(); p.wg.Wait() })
	return p
}

func (p *review53Proxy) kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			tc.SetLinger(0)
		}
		c.Close()
	}
	p.conns = nil
}

func review53ProxyRig(t *testing.T) (*grpctest.Server, *review53Proxy, *grpc.ClientConn, *breaker.Breaker) {
	srv, err := grpctest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	p := newReview53Proxy(t, srv.Addr)
	b := breaker.New("r53proxy", breaker.ConsecutiveFailures(100))
	ic := grpcclient.New(grpcclient.WithPipeline(pipeline.New(pipeline.WithBreaker(b), pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(5*time.Millisecond), retrypolicy.MaxDelay(20*time.Millisecond))))))
	cc, err := grpctest.Dial(p.ln.Addr().String(), ic.DialOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return srv, p, cc, b
}

// Connection reset before headers: Upload retried with replay, in order.
func TestReview53_ProxyResetUncommitted(t *testing.T) {
	review53Leak(t)
	srv, p, cc, _ := review53ProxyRig(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := cc.NewStream(ctx, grpctest.UploadDesc, grpctest.Upload)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"a", "b"} {
		if err := st.SendMsg(wrapperspb.String(m)); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		if cs := srv.Calls(grpctest.Upload); len(cs) == 1 && len(cs[0].Received) == 2 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	p.kill()
	time.Sleep(20 * time.Millisecond)
	for _, m := range []string{"c", "d"} {
		if err := st.SendMsg(wrapperspb.String(m)); err != nil {
			t.Fatalf("send %s: %v", m, err)
		}
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	got := new(wrapperspb.StringValue)
	if err := st.RecvMsg(got); err != nil {
		t.Fatalf("recv: %v (calls %+v)", err, srv.Calls(grpctest.Upload))
	}
	if got.GetValue() != "a,b,c,d" {
		t.Fatalf("got %q", got.GetValue())
	}
	if err := st.RecvMsg(got); err != io.EOF {
		t.Fatalf("end: %v", err)
	}
}

// Connection reset after the response began: no replay, error to the caller, a breaker failure.
func TestReview53_ProxyResetCommitted(t *testing.T) {
	review53Leak(t)
	srv, p, cc, b := review53ProxyRig(t)
	srv.Items = 1000000
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := cc.NewStream(ctx, grpctest.ListDesc, grpctest.List)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SendMsg(wrapperspb.String("x")); err != nil {
		t.Fatal(err)
	}
	_ = st.CloseSend()
	m := new(wrapperspb.StringValue)
	if err := st.RecvMsg(m); err != nil {
		t.Fatal(err)
	}
	p.kill()
	var rerr error
	for rerr == nil {
		rerr = st.RecvMsg(m)
	}
	if rerr == io.EOF || status.Code(rerr) != codes.Unavailable {
		t.Logf("err after reset: %v", rerr)
	}
	if n := srv.Count(grpctest.List); n != 1 {
		t.Fatalf("server saw %d calls: replayed after commit", n)
	}
	time.Sleep(50 * time.Millisecond)
	if c := b.Counts(); c.TotalFailures != 1 {
		t.Fatalf("breaker %+v", c)
	}
	// A non-idempotent unary call reset in flight: not retried.
	srv.SetFault(grpctest.Create, grpctest.Fault{Code: codes.OK, Delay: 200 * time.Millisecond})
	go func() {
		for srv.Count(grpctest.Create) == 0 {
			time.Sleep(time.Millisecond)
		}
		p.kill()
	}()
	_, err = grpctest.NewClient(cc).Create(ctx, "c")
	t.Logf("Create after reset: %v; server saw %d", err, srv.Count(grpctest.Create))
	time.Sleep(300 * time.Millisecond)
	if n := srv.Count(grpctest.Create); n != 1 {
		t.Fatalf("non-idempotent Create duplicated: %d", n)
	}
}
