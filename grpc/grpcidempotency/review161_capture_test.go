package grpcidempotency_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/resiliencekit/resiliencekit/grpc/grpcidempotency"
	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/idempotencykey"
)

type review161Svc interface{}

func review161Server(t *testing.T, h func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error)) *grpc.ClientConn {
	t.Helper()
	desc := grpc.ServiceDesc{
		ServiceName: "review161.S",
		HandlerType: (*review161Svc)(nil),
		Methods: []grpc.MethodDesc{{MethodName: "M", Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			info := &grpc.UnaryServerInfo{Server: srv, FullMethod: "/review161.S/M"}
			return ic(ctx, in, info, func(ctx context.Context, req any) (any, error) { return h(ctx, req.(*wrapperspb.StringValue)) })
		}}},
	}
	s := grpc.NewServer(grpc.ChainUnaryInterceptor(grpcidempotency.UnaryServerInterceptor(idempotency.NewGuard(nil), grpcidempotency.SharedKeys())))
	s.RegisterService(&desc, struct{}{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	t.Cleanup(s.Stop)
	cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

func review161Call(t *testing.T, cc *grpc.ClientConn, key string) (metadata.MD, metadata.MD, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, idempotencykey.MetadataKey, key)
	var hdr, trl metadata.MD
	out := new(wrapperspb.StringValue)
	err := cc.Invoke(ctx, "/review161.S/M", wrapperspb.String("in"), out, grpc.Header(&hdr), grpc.Trailer(&trl))
	return hdr, trl, err
}

// What the first call's client got is what a repeat gets: a header sent
// by SendHeader, a trailer set after it, and not a header refused after
// the header went; several SetHeader before the send all kept.
func TestReview161_Capture_ReplayMatchesFirst(t *testing.T) {
	var runs atomic.Int64
	cc := review161Server(t, func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		runs.Add(1)
		if err := grpc.SetHeader(ctx, metadata.Pairs("h1", "a")); err != nil {
			t.Errorf("SetHeader h1: %v", err)
		}
		if err := grpc.SetHeader(ctx, metadata.Pairs("h1", "b", "hb-bin", "\x00\xff")); err != nil {
			t.Errorf("SetHeader h1 b: %v", err)
		}
		if err := grpc.SendHeader(ctx, metadata.Pairs("h2", "c")); err != nil {
			t.Errorf("SendHeader: %v", err)
		}
		if err := grpc.SetHeader(ctx, metadata.Pairs("late", "x")); err == nil {
			t.Errorf("late SetHeader accepted")
		}
		if err := grpc.SendHeader(ctx, metadata.Pairs("late2", "x")); err == nil {
			t.Errorf("second SendHeader accepted")
		}
		if err := grpc.SetTrailer(ctx, metadata.Pairs("t1", "d")); err != nil {
			t.Errorf("SetTrailer: %v", err)
		}
		return wrapperspb.String("out"), nil
	})
	h1, t1, err := review161Call(t, cc, "k161-a")
	if err != nil {
		t.Fatal(err)
	}
	h2, t2, err := review161Call(t, cc, "k161-a")
	if err != nil {
		t.Fatal(err)
	}
	if runs.Load() != 1 {
		t.Fatalf("runs %d", runs.Load())
	}
	for _, k := range []string{"h1", "h2", "hb-bin", "late", "late2"} {
		a, b := h1.Get(k), h2.Get(k)
		if len(a) != len(b) {
			t.Errorf("header %s: first %q, replay %q", k, a, b)
			continue
		}
		for i := range a {
			if a[i] != b[i] {
				t.Errorf("header %s: first %q, replay %q", k, a, b)
			}
		}
	}
	if got := t2.Get("t1"); len(got) != 1 || got[0] != "d" || len(t1.Get("t1")) != 1 {
		t.Errorf("trailer t1: first %q replay %q", t1.Get("t1"), got)
	}
	if len(h2.Get(grpcidempotency.ReplayedKey)) != 1 {
		t.Errorf("no replay mark: %v", h2)
	}
}

// Outside a gRPC server (a handler called directly, as in a unit test),
// metadata set is kept and the calls succeed.
func TestReview161_Capture_NoServer(t *testing.T) {
	ic := grpcidempotency.UnaryServerInterceptor(idempotency.NewGuard(nil), grpcidempotency.SharedKeys())
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(idempotencykey.MetadataKey, "k161-b"))
	info := &grpc.UnaryServerInfo{FullMethod: "/review161.S/M"}
	var errs []error
	_, err := ic(ctx, wrapperspb.String("x"), info, func(ctx context.Context, req any) (any, error) {
		errs = append(errs, grpc.SetHeader(ctx, metadata.Pairs("a", "1")), grpc.SendHeader(ctx, metadata.Pairs("b", "2")), grpc.SetTrailer(ctx, metadata.Pairs("c", "3")))
		return wrapperspb.String("y"), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range errs {
		if e != nil {
			t.Errorf("call %d: %v", i, e)
		}
	}
}
