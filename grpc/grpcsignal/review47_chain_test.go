package grpcsignal_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/resiliencekit/resiliencekit/grpc/grpcclient"
	"github.com/resiliencekit/resiliencekit/grpc/grpcidempotency"
	"github.com/resiliencekit/resiliencekit/grpc/grpcsignal"
	"github.com/resiliencekit/resiliencekit/grpc/grpctest"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// r47Mid is a middle hop that serves the grpctest Echo service (so that
// its Get is NO_SIDE_EFFECTS for the client above) by calling down.
type r47Mid struct {
	addr string
	runs atomic.Int64
	h    func(ctx context.Context, in *wrapperspb.StringValue) (any, error)
}

func r47StartMid(t *testing.T, h func(ctx context.Context, in *wrapperspb.StringValue) (any, error), opts ...grpc.ServerOption) *r47Mid {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := &r47Mid{addr: lis.Addr().String(), h: h}
	unary := func(method string) func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
		return func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			h := func(ctx context.Context, req any) (any, error) {
				m.runs.Add(1)
				return m.h(ctx, req.(*wrapperspb.StringValue))
			}
			if icpt == nil {
				return h(ctx, in)
			}
			return icpt(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: method}, h)
		}
	}
	s := grpc.NewServer(opts...)
	s.RegisterService(&grpc.ServiceDesc{
		ServiceName: grpctest.Service,
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{
			{MethodName: "Get", Handler: unary(grpctest.Get)},
			{MethodName: "Create", Handler: unary(grpctest.Create)},
		},
	}, m)
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Serve(lis) }()
	t.Cleanup(func() { s.Stop(); <-done })
	return m
}

func r47Resilient(t *testing.T, addr string, attempts int) *grpc.ClientConn {
	return r47ResilientMax(t, addr, attempts, 5*time.Millisecond)
}

func r47ResilientMax(t *testing.T, addr string, attempts int, maxDelay time.Duration) *grpc.ClientConn {
	t.Helper()
	ic := grpcclient.New(grpcclient.WithPipeline(pipeline.New(
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(attempts), retrypolicy.BaseDelay(time.Millisecond), retrypolicy.MaxDelay(maxDelay))),
		pipeline.WithTimeBudget(3*time.Second),
	)))
	cc, err := grpctest.Dial(addr, ic.DialOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

func r47Plain(t *testing.T, addr string) *grpc.ClientConn {
	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// A -> B -> C, each client resilient (3 attempts), B behind grpcsignal's
// interceptor. How many times does C get each call?
func TestReview47ChainSignal(t *testing.T) {
	cases := []struct {
		name      string
		fault     grpctest.Fault
		method    string // what B calls on C
		wantC     int
		wantB     int
		wantCode  codes.Code
		wantNoRet bool
	}{
		// B retried: A must not.
		{"B retried", grpctest.Fault{Code: codes.Unavailable}, grpctest.Get, 3, 1, codes.Unavailable, true},
		// B's one attempt at a non-idempotent method, not retried: A may retry.
		{"B tried once", grpctest.Fault{Code: codes.Unavailable}, grpctest.Create, 3, 3, codes.Unavailable, false},
		// C says "don't retry" (it retried below): through B, A must not retry.
		{"C said no", grpctest.Fault{Code: codes.Unavailable, Pushback: "-1"}, grpctest.Get, 1, 1, codes.Unavailable, true},
		// C says "retry in 10 s": B cannot wait within A's deadline, which
		// A has no more time than: out of its caller's time, B says so,
		// and A does not retry sooner than C asked either.
		{"C said later", grpctest.Fault{Code: codes.Unavailable, Pushback: "10000"}, grpctest.Get, 1, 1, codes.Unavailable, true},
		// NOT_FOUND from C on the first attempt: nobody retried; the code is kept.
		{"C not found", grpctest.Fault{Code: codes.NotFound, Message: "no such order"}, grpctest.Get, 1, 1, codes.NotFound, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := grpctest.Start()
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetFault(tc.method, tc.fault)
			toC := grpctest.NewClient(r47ResilientMax(t, c.Addr, 3, 20*time.Second))
			b := r47StartMid(t, func(ctx context.Context, in *wrapperspb.StringValue) (any, error) {
				var out string
				var err error
				if tc.method == grpctest.Get {
					out, err = toC.Get(ctx, in.GetValue())
				} else {
					out, err = toC.Create(ctx, in.GetValue())
				}
				if err != nil {
					return nil, err
				}
				return wrapperspb.String(out), nil
			}, grpc.UnaryInterceptor(grpcsignal.UnaryServerInterceptor))
			// A: resilient, with the trailer read directly too, from a plain conn.
			var tr metadata.MD
			_, errA := grpctest.NewClient(r47Resilient(t, b.addr, 3)).Get(context.Background(), "x", grpc.Trailer(&tr))
			_, retry, ok := grpcsignal.Pushback(tr)
			t.Logf("A got %v (%q), pushback ok=%v retry=%v; B ran %d, C got %d", status.Code(errA), status.Convert(errA).Message(), ok, retry, b.runs.Load(), c.Count(tc.method))
			if status.Code(errA) != tc.wantCode {
				t.Errorf("code %v, want %v", status.Code(errA), tc.wantCode)
			}
			if tc.wantC >= 0 && c.Count(tc.method) != tc.wantC {
				t.Errorf("C got %d calls, want %d", c.Count(tc.method), tc.wantC)
			}
			if tc.wantB >= 0 && int(b.runs.Load()) != tc.wantB {
				t.Errorf("B ran %d times, want %d", b.runs.Load(), tc.wantB)
			}
			if (ok && !retry) != tc.wantNoRet {
				t.Errorf("no-retry signal %v, want %v", ok && !retry, tc.wantNoRet)
			}
		})
	}
}

// grpcsignal inside grpcidempotency, as grpcidempotency's doc asks: the
// replay of a keyed call whose dependency gave up is the first answer
// (code, message, don't-retry trailer). (Outside it, the replay was the
// handler's raw error: the order is documented, not enforced.)
func TestReview47SignalAndIdempotencyOrder(t *testing.T) {
	for _, signalOutside := range []bool{false} {
		name := map[bool]string{true: "signal outside", false: "signal inside"}[signalOutside]
		t.Run(name, func(t *testing.T) {
			c, err := grpctest.Start()
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetFault(grpctest.Get, grpctest.Fault{Code: codes.Internal, Message: "C's secret internals"})
			toC := grpctest.NewClient(r47Resilient(t, c.Addr, 3))
			idem := grpcidempotency.UnaryServerInterceptor(nil, grpcidempotency.SharedKeys())
			chain := []grpc.UnaryServerInterceptor{grpcsignal.UnaryServerInterceptor, idem}
			if !signalOutside {
				chain = []grpc.UnaryServerInterceptor{idem, grpcsignal.UnaryServerInterceptor}
			}
			b := r47StartMid(t, func(ctx context.Context, in *wrapperspb.StringValue) (any, error) {
				out, err := toC.Get(ctx, in.GetValue())
				if err != nil {
					return nil, err
				}
				return wrapperspb.String(out), nil
			}, grpc.ChainUnaryInterceptor(chain...))
			cc := r47Plain(t, b.addr)
			var answers []string
			for range 2 {
				ctx := metadata.AppendToOutgoingContext(context.Background(), "idempotency-key", "k")
				var tr metadata.MD
				_, err := grpctest.NewClient(cc).Create(ctx, "x", grpc.Trailer(&tr))
				st := status.Convert(err)
				answers = append(answers, st.Code().String()+" "+st.Message()+" pushback="+join(tr.Get(grpcsignal.PushbackKey)))
			}
			t.Logf("first:  %s\nreplay: %s\n(B ran %d)", answers[0], answers[1], b.runs.Load())
			if answers[0] != answers[1] {
				t.Errorf("the replay differs from the first answer")
			}
		})
	}
}

func join(vs []string) string {
	s := ""
	for _, v := range vs {
		s += v + ";"
	}
	return s
}
