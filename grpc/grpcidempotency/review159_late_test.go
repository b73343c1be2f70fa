package grpcidempotency_test

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

	"github.com/resiliencekit/resiliencekit/grpc/grpcidempotency"
	"github.com/resiliencekit/resiliencekit/idempotency"
)

// r159Handler is the handler of the one unary method of review159's
// service.
type r159Handler func(ctx context.Context, req *wrapperspb.StringValue) (*wrapperspb.StringValue, error)

// r159Serve starts a real grpc-go server on 127.0.0.1 with the
// interceptor in front of h, and returns a client connection.
func r159Serve(t *testing.T, guard *idempotency.Guard, h r159Handler) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(grpcidempotency.UnaryServerInterceptor(guard, grpcidempotency.SharedKeys())))
	desc := grpc.ServiceDesc{
		ServiceName: "review159.Svc",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "Do",
			Handler: func(_ any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
				in := new(wrapperspb.StringValue)
				if err := dec(in); err != nil {
					return nil, err
				}
				info := &grpc.UnaryServerInfo{FullMethod: "/review159.Svc/Do"}
				return icpt(ctx, in, info, func(ctx context.Context, req any) (any, error) {
					return h(ctx, req.(*wrapperspb.StringValue))
				})
			},
		}},
	}
	var impl any = struct{}{}
	srv.RegisterService(&desc, impl)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

type r159Answer struct {
	resp    *wrapperspb.StringValue
	err     error
	header  metadata.MD
	trailer metadata.MD
}

func r159Call(t *testing.T, cc *grpc.ClientConn, key, msg string) r159Answer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if key != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "idempotency-key", key)
	}
	var a r159Answer
	a.resp = new(wrapperspb.StringValue)
	a.err = cc.Invoke(ctx, "/review159.Svc/Do", wrapperspb.String(msg), a.resp, grpc.Header(&a.header), grpc.Trailer(&a.trailer))
	return a
}

// TestReview159_ReplayCarriesNoHeaderTheFirstCallNeverSent: a header
// that the handler set after the header went out (grpc-go refuses it:
// SetHeader after SendHeader, a second SendHeader) never reached the
// first caller. The package promises that a repeat "gets it back": the
// answer the first call got. A replay that carries the refused header
// answers the repeat with metadata the first call never had.
func TestReview159_ReplayCarriesNoHeaderTheFirstCallNeverSent(t *testing.T) {
	var runs atomic.Int64
	var lateErr, secondErr atomic.Value
	cc := r159Serve(t, idempotency.NewGuard(nil), func(ctx context.Context, req *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		runs.Add(1)
		if err := grpc.SendHeader(ctx, metadata.Pairs("early", "1")); err != nil {
			t.Errorf("SendHeader: %v", err)
		}
		if err := grpc.SetHeader(ctx, metadata.Pairs("late", "x")); err != nil {
			lateErr.Store(err) // grpc-go: the header has gone
		}
		if err := grpc.SendHeader(ctx, metadata.Pairs("second", "y")); err != nil {
			secondErr.Store(err)
		}
		return wrapperspb.String("ok:" + req.GetValue()), nil
	})
	first := r159Call(t, cc, "k-late-1", "a")
	if first.err != nil {
		t.Fatal(first.err)
	}
	if lateErr.Load() == nil || secondErr.Load() == nil {
		t.Skipf("grpc-go accepted the late headers (late %v, second %v): nothing to check", lateErr.Load(), secondErr.Load())
	}
	if first.header.Get("late") != nil || first.header.Get("second") != nil {
		t.Fatalf("premise: the first call got the refused headers: %v", first.header)
	}
	repeat := r159Call(t, cc, "k-late-1", "a")
	if repeat.err != nil {
		t.Fatal(repeat.err)
	}
	if runs.Load() != 1 {
		t.Fatalf("handler ran %d times", runs.Load())
	}
	if repeat.resp.GetValue() != first.resp.GetValue() {
		t.Fatalf("replayed %q, first %q", repeat.resp.GetValue(), first.resp.GetValue())
	}
	if got := repeat.header.Get("early"); len(got) != 1 || got[0] != "1" {
		t.Errorf("replay lost the header the first call got: %v", repeat.header)
	}
	if late, second := repeat.header.Get("late"), repeat.header.Get("second"); late != nil || second != nil {
		t.Errorf("replay carries headers the first call never got (grpc-go refused them: %v / %v): late=%v second=%v; first call's header %v",
			lateErr.Load(), secondErr.Load(), late, second, first.header)
	}
}

// TestReview159_ReplayOfMetadataSetAsAMapLiteral: a handler that fills
// metadata.MD by hand with a name in upper case has its answer refused by
// grpc-go as it is sent (INTERNAL, invalid header field name), after the
// handler ran and its answer was recorded. The repeat gets the handler's
// answer, its names in lower case as gRPC has them, not the refusal
// again, which every later retry would meet: the effect ran once, and the
// client learns its outcome (the reviewer's note, kept as the behaviour).
func TestReview159_ReplayOfMetadataSetAsAMapLiteral(t *testing.T) {
	var runs atomic.Int32
	cc := r159Serve(t, idempotency.NewGuard(nil), func(ctx context.Context, req *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		runs.Add(1)
		grpc.SetHeader(ctx, metadata.MD{"X-Up": {"v"}, "x-low": {"w"}})
		grpc.SetTrailer(ctx, metadata.MD{"T-Up": {"t"}})
		return wrapperspb.String("ok"), nil
	})
	first := r159Call(t, cc, "k-case-1", "a")
	repeat := r159Call(t, cc, "k-case-1", "a")
	if status.Code(first.err) != codes.Internal {
		t.Fatalf("premise: grpc-go refuses the upper-case name: %v", first.err)
	}
	if repeat.err != nil || repeat.resp.GetValue() != "ok" {
		t.Fatalf("repeat: %v %v", repeat.resp, repeat.err)
	}
	if runs.Load() != 1 {
		t.Errorf("handler ran %d times", runs.Load())
	}
	if got := repeat.header.Get("x-up"); len(got) != 1 || got[0] != "v" {
		t.Errorf("repeat's header %v", repeat.header)
	}
}
