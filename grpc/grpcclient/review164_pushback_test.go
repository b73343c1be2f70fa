package grpcclient_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/grpc/grpcclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

const r164Method = "/r164.P/Get"

// r164Srv answers every method by fn, over real TCP.
type r164Srv struct {
	calls atomic.Int64
	addr  string
}

func r164Start(t *testing.T, fn func(ctx context.Context, in *wrapperspb.StringValue) error, sopts ...grpc.ServerOption) *r164Srv {
	t.Helper()
	s := &r164Srv{}
	sopts = append(sopts, grpc.UnknownServiceHandler(func(_ any, ss grpc.ServerStream) error {
		s.calls.Add(1)
		in := new(wrapperspb.StringValue)
		if err := ss.RecvMsg(in); err != nil {
			return err
		}
		if err := fn(ss.Context(), in); err != nil {
			return err
		}
		return ss.SendMsg(wrapperspb.String("ok:" + in.GetValue()))
	}))
	srv := grpc.NewServer(sopts...)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.addr = lis.Addr().String()
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return s
}

type r164Count struct{ n atomic.Int64 }

func (c *r164Count) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	c.n.Add(1)
	return invoker(ctx, method, req, reply, cc, opts...)
}

func r164Client(t *testing.T, target string, p *pipeline.Pipeline, cnt *r164Count, extra ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	ic := grpcclient.New(grpcclient.WithPipeline(p), grpcclient.RetryMethods(r164Method))
	opts := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, ic.DialOptions()...)
	if cnt != nil {
		opts = append(opts, grpc.WithChainUnaryInterceptor(cnt.unary))
	}
	opts = append(opts, extra...)
	cc, err := grpc.NewClient(target, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

func r164Invoke(ctx context.Context, cc *grpc.ClientConn, in string, opts ...grpc.CallOption) (string, error) {
	out := new(wrapperspb.StringValue)
	err := cc.Invoke(ctx, r164Method, wrapperspb.String(in), out, opts...)
	return out.GetValue(), err
}

// (2) hostile pushback values: never a wait past MaxDelay, never a panic,
// and a retry exactly when gRFC A6 allows one.
func TestReview164PushbackHostile(t *testing.T) {
	const maxDelay = 40 * time.Millisecond
	cases := []struct {
		vals  []string
		retry bool
	}{
		{[]string{"-1"}, false},
		{[]string{"0"}, true},
		{[]string{"10"}, true},
		{[]string{"2147483647"}, true},
		{[]string{"2147483648"}, false},
		{[]string{"-2147483649"}, false},
		{[]string{"99999999999999999999999"}, false},
		{[]string{"abc"}, false},
		{[]string{""}, false},
		{[]string{"1.5"}, false},
		{[]string{"1e3"}, false},
		{[]string{"0x10"}, false},
		{[]string{" 5"}, false},
		{[]string{"5", "5"}, false},
		{[]string{"-1", "5"}, false},
		{[]string{"5", "-1"}, false},
		{[]string{strings.Repeat("9", 4000)}, false},
	}
	for i, c := range cases {
		name := fmt.Sprintf("%q", c.vals)
		if len(name) > 40 {
			name = fmt.Sprint("long", i)
		}
		t.Run(name, func(t *testing.T) {
			srv := r164Start(t, func(ctx context.Context, _ *wrapperspb.StringValue) error {
				md := metadata.MD{}
				md["grpc-retry-pushback-ms"] = c.vals
				_ = grpc.SetTrailer(ctx, md)
				return status.Error(codes.Unavailable, "busy")
			})
			p := pipeline.New(pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond), retrypolicy.MaxDelay(maxDelay))))
			cc := r164Client(t, srv.addr, p, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			start := time.Now()
			_, err := r164Invoke(ctx, cc, "x")
			took := time.Since(start)
			if status.Code(err) != codes.Unavailable {
				t.Errorf("got %v, want UNAVAILABLE", err)
			}
			want := int64(1)
			if c.retry {
				want = 3
			}
			if got := srv.calls.Load(); got != want {
				t.Errorf("server saw %d attempts, want %d", got, want)
			}
			if took > 2*maxDelay+700*time.Millisecond {
				t.Errorf("call took %v, past 2 x MaxDelay %v", took, maxDelay)
			}
		})
	}
}

// (2) a pushback that does not fit in the time budget (or the caller's
// deadline) ends the call at once with the answer.
func TestReview164PushbackBudget(t *testing.T) {
	for _, budget := range []bool{true, false} {
		t.Run(fmt.Sprint("budget=", budget), func(t *testing.T) {
			srv := r164Start(t, func(ctx context.Context, _ *wrapperspb.StringValue) error {
				_ = grpc.SetTrailer(ctx, metadata.Pairs("grpc-retry-pushback-ms", "2147483647"))
				return status.Error(codes.Unavailable, "busy")
			})
			opts := []pipeline.Option{pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(5), retrypolicy.MaxDelay(time.Hour)))}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if budget {
				opts = append(opts, pipeline.WithTimeBudget(300*time.Millisecond))
			} else {
				var c2 context.CancelFunc
				ctx, c2 = context.WithTimeout(ctx, 300*time.Millisecond)
				defer c2()
			}
			cc := r164Client(t, srv.addr, pipeline.New(opts...), nil)
			start := time.Now()
			_, err := r164Invoke(ctx, cc, "x")
			took := time.Since(start)
			if took > 400*time.Millisecond {
				t.Errorf("call took %v past a 300ms budget", took)
			}
			if status.Code(err) != codes.Unavailable {
				t.Errorf("got %v, want the answer UNAVAILABLE", err)
			}
			if !errors.Is(err, retrypolicy.ErrOutOfTime) {
				t.Logf("err does not match ErrOutOfTime: %v", err)
			}
		})
	}
}

// (3) the trailer (but for the signal) of the last attempt reaches the
// caller, and the code stays.
func TestReview164TrailerKept(t *testing.T) {
	srv := r164Start(t, func(ctx context.Context, _ *wrapperspb.StringValue) error {
		_ = grpc.SetTrailer(ctx, metadata.Pairs("x-d", "v", "x-bin-bin", "\x00\x01"))
		return status.Error(codes.Unavailable, "busy")
	})
	p := pipeline.New(pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond), retrypolicy.MaxDelay(5*time.Millisecond))))
	cc := r164Client(t, srv.addr, p, nil)
	var tr metadata.MD
	var fin []error
	_, err := r164Invoke(context.Background(), cc, "x", grpc.Trailer(&tr), grpc.OnFinish(func(err error) { fin = append(fin, err) }))
	if status.Code(err) != codes.Unavailable {
		t.Errorf("got %v", err)
	}
	if got := tr.Get("x-d"); len(got) != 1 || got[0] != "v" {
		t.Errorf("trailer lost: %v", tr)
	}
	if got := tr.Get("x-bin-bin"); len(got) != 1 || got[0] != "\x00\x01" {
		t.Errorf("binary trailer lost: %v", tr)
	}
	if len(fin) != 1 || status.Code(fin[0]) != codes.Unavailable {
		t.Errorf("OnFinish called %d times: %v", len(fin), fin)
	}
}

// r164Breaker is a pipeline with a breaker opening at 2 failures, and
// fast retries.
func r164Breaker() (*pipeline.Pipeline, *breaker.Breaker) {
	b := breaker.New("r164", breaker.ConsecutiveFailures(2), breaker.OpenTimeout(time.Minute))
	return pipeline.New(pipeline.WithBreaker(b), pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond), retrypolicy.MaxDelay(5*time.Millisecond)))), b
}

// (2) the caller's own errors neither spend retries nor count against
// the breaker.
func TestReview164CallerErrorsNotCounted(t *testing.T) {
	big := strings.Repeat("x", 4096)
	t.Run("MaxCallSendMsgSize", func(t *testing.T) {
		srv := r164Start(t, func(context.Context, *wrapperspb.StringValue) error { return nil })
		p, b := r164Breaker()
		cnt := new(r164Count)
		cc := r164Client(t, srv.addr, p, cnt, grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(1024)))
		for range 5 {
			_, err := r164Invoke(context.Background(), cc, big)
			if status.Code(err) != codes.ResourceExhausted {
				t.Errorf("got %v", err)
			}
		}
		if n := cnt.n.Load(); n != 5 {
			t.Errorf("%d attempts for 5 calls too large to send, want 5", n)
		}
		if b.State() != resilience.StateClosed {
			t.Errorf("breaker %v after the caller's own errors", b.State())
		}
	})
	t.Run("MaxCallRecvMsgSize", func(t *testing.T) {
		srv := r164Start(t, func(context.Context, *wrapperspb.StringValue) error { return nil })
		p, b := r164Breaker()
		cc := r164Client(t, srv.addr, p, nil, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1024)))
		for range 5 {
			_, err := r164Invoke(context.Background(), cc, big)
			if status.Code(err) != codes.ResourceExhausted {
				t.Errorf("got %v", err)
			}
		}
		if n := srv.calls.Load(); n != 5 {
			t.Errorf("server saw %d for 5 calls, want 5 (no retry)", n)
		}
		if b.State() != resilience.StateClosed {
			t.Errorf("breaker %v after the caller's own errors", b.State())
		}
	})
	t.Run("ServerMaxRecvMsgSize", func(t *testing.T) {
		srv := r164Start(t, func(context.Context, *wrapperspb.StringValue) error { return nil }, grpc.MaxRecvMsgSize(1024))
		p, b := r164Breaker()
		cnt := new(r164Count)
		cc := r164Client(t, srv.addr, p, cnt)
		for range 5 {
			_, err := r164Invoke(context.Background(), cc, big)
			if status.Code(err) != codes.ResourceExhausted {
				t.Errorf("got %v", err)
			}
		}
		if n := cnt.n.Load(); n != 5 {
			t.Errorf("%d attempts for 5 calls, want 5 (no retry)", n)
		}
		if b.State() != resilience.StateClosed {
			t.Errorf("breaker %v after the caller's own errors", b.State())
		}
	})
	t.Run("CallerCancel", func(t *testing.T) {
		srv := r164Start(t, func(ctx context.Context, _ *wrapperspb.StringValue) error {
			<-ctx.Done()
			return status.FromContextError(ctx.Err()).Err()
		})
		p, b := r164Breaker()
		cnt := new(r164Count)
		cc := r164Client(t, srv.addr, p, cnt)
		for range 5 {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(30*time.Millisecond, cancel)
			_, err := r164Invoke(ctx, cc, "x")
			if status.Code(err) != codes.Canceled {
				t.Errorf("got %v", err)
			}
			cancel()
		}
		if n := cnt.n.Load(); n != 5 {
			t.Errorf("%d attempts for 5 canceled calls, want 5", n)
		}
		if b.State() != resilience.StateClosed {
			t.Errorf("breaker %v after the caller's own cancellations", b.State())
		}
	})
	t.Run("CallerCancelBeforeCall", func(t *testing.T) {
		srv := r164Start(t, func(context.Context, *wrapperspb.StringValue) error { return nil })
		p, b := r164Breaker()
		cc := r164Client(t, srv.addr, p, nil)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		for range 5 {
			if _, err := r164Invoke(ctx, cc, "x"); status.Code(err) != codes.Canceled {
				t.Errorf("got %v", err)
			}
		}
		if b.State() != resilience.StateClosed {
			t.Errorf("breaker %v after the caller's own cancellations", b.State())
		}
	})
	t.Run("BadTarget", func(t *testing.T) {
		t.Skip("documented (docs/retries.md, the classes table): a name that does not resolve is a DNS failure, transient and counted, as for HTTP")
		p, b := r164Breaker()
		cnt := new(r164Count)
		cc := r164Client(t, "dns:///r164-no-such-host.invalid:443", p, cnt)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_, err := r164Invoke(ctx, cc, "x")
		t.Logf("bad target: %v; attempts %d; breaker %v", err, cnt.n.Load(), b.State())
		if n := cnt.n.Load(); n != 1 {
			t.Errorf("%d attempts for a bad target, want 1", n)
		}
		_, _ = r164Invoke(ctx, cc, "x")
		if b.State() != resilience.StateClosed {
			t.Errorf("breaker %v after 2 calls to a target that does not resolve", b.State())
		}
	})
}
