package grpcidempotency_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	_ "google.golang.org/grpc/encoding/gzip" // registers the gzip compressor
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/resiliencekit/resiliencekit/grpc/grpcidempotency"
	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/idempotencykey"
)

// r105Server serves one unary method, /r105.Svc/Do, whose handler is h,
// behind the interceptor when guarded, and returns a client connection.
func r105Server(t *testing.T, guarded bool, h func(ctx context.Context, req *wrapperspb.StringValue) (*wrapperspb.StringValue, error)) *grpc.ClientConn {
	t.Helper()
	var opts []grpc.ServerOption
	if guarded {
		opts = append(opts, grpc.UnaryInterceptor(grpcidempotency.UnaryServerInterceptor(idempotency.NewGuard(idempotency.NewMemoryStore(0)), grpcidempotency.SharedKeys())))
	}
	return r105Serve(t, h, opts...)
}

// r105Serve serves /r105.Svc/Do, whose handler is h, with opts, and
// returns a client connection.
func r105Serve(t *testing.T, h func(ctx context.Context, req *wrapperspb.StringValue) (*wrapperspb.StringValue, error), opts ...grpc.ServerOption) *grpc.ClientConn {
	t.Helper()
	s := grpc.NewServer(opts...)
	s.RegisterService(&grpc.ServiceDesc{
		ServiceName: "r105.Svc",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "Do",
			Handler: func(_ any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
				in := new(wrapperspb.StringValue)
				if err := dec(in); err != nil {
					return nil, err
				}
				info := &grpc.UnaryServerInfo{FullMethod: "/r105.Svc/Do"}
				hh := func(ctx context.Context, req any) (any, error) { return h(ctx, req.(*wrapperspb.StringValue)) }
				if ic == nil {
					return hh(ctx, in)
				}
				return ic(ctx, in, info, hh)
			},
		}},
	}, struct{}{})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.Serve(l) }()
	t.Cleanup(s.Stop)
	cc, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

func r105Call(t *testing.T, cc *grpc.ClientConn, key string, opts ...grpc.CallOption) (*wrapperspb.StringValue, error, metadata.MD) {
	t.Helper()
	ctx := t.Context()
	if key != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, idempotencykey.MetadataKey, key)
	}
	out := new(wrapperspb.StringValue)
	var hdr metadata.MD
	opts = append(opts, grpc.Header(&hdr))
	err := cc.Invoke(ctx, "/r105.Svc/Do", wrapperspb.String("order"), out, opts...)
	return out, err, hdr
}

// A status whose message is not valid UTF-8 (an error text with a raw byte
// of a file name, a database value, a Latin-1 string) is sent as it is by
// grpc-go (grpc-message is percent-encoded). The first call gets its code;
// a repeat must be replayed with the same code, never another.
func TestReview105StatusWithANonUTF8MessageIsReplayedWithItsCode(t *testing.T) {
	var runs atomic.Int64
	h := func(ctx context.Context, req *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		runs.Add(1)
		return nil, grpcstatus.Error(codes.FailedPrecondition, "no such file: caf\xe9.txt")
	}
	plain := r105Server(t, false, h)
	_, err, _ := r105Call(t, plain, "")
	if grpcstatus.Code(err) != codes.FailedPrecondition {
		t.Fatalf("plain server: got %v, want FailedPrecondition", err)
	}
	cc := r105Server(t, true, h)
	_, first, _ := r105Call(t, cc, "k1")
	if grpcstatus.Code(first) != codes.FailedPrecondition {
		t.Fatalf("first keyed call: got %v, want FailedPrecondition", first)
	}
	runs.Store(0)
	_, again, hdr := r105Call(t, cc, "k1")
	t.Logf("repeat: %v, replayed header %v, runs %d", again, hdr.Get(grpcidempotency.ReplayedKey), runs.Load())
	if runs.Load() != 0 {
		t.Errorf("the repeat ran the handler again (%d runs)", runs.Load())
	}
	if grpcstatus.Code(again) != codes.FailedPrecondition {
		t.Errorf("the repeat got %v (code %v), where the first call got FailedPrecondition: a wrong replay", again, grpcstatus.Code(again))
	}
}

// The same through a store that keeps JSON (jsonStore): the repeat gets
// the message the first call got (grpc-go sends each byte that is not
// UTF-8 as U+FFFD), from the message's bytes kept in the record's header.
func TestReview105StatusWithANonUTF8MessageThroughJSON(t *testing.T) {
	const msg = "no such file: caf\xe9\xe8.txt"
	var runs atomic.Int64
	h := func(ctx context.Context, req *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		runs.Add(1)
		return nil, grpcstatus.Error(codes.FailedPrecondition, msg)
	}
	guard := idempotency.NewGuard(jsonStore{idempotency.NewMemoryStore(0)})
	cc := r105Serve(t, h, grpc.UnaryInterceptor(grpcidempotency.UnaryServerInterceptor(guard, grpcidempotency.SharedKeys())))
	_, err, _ := r105Call(t, cc, "k4")
	first, _ := grpcstatus.FromError(err)
	_, err, _ = r105Call(t, cc, "k4")
	again, _ := grpcstatus.FromError(err)
	if first.Code() != codes.FailedPrecondition || again.Code() != first.Code() || again.Message() != first.Message() || runs.Load() != 1 {
		t.Errorf("first %v %q, repeat %v %q, %d runs; want the first's answer, once", first.Code(), first.Message(), again.Code(), again.Message(), runs.Load())
	}
}

// grpc.SetSendCompressor and grpc.ClientSupportedCompressors find grpc-go's
// own stream in the context, which a keyed call's handler does not have
// behind the interceptor (it records the metadata the handler sets): the
// package doc says so, and that an interceptor chained before this one can
// call them. This test holds the documented limit and its way out.
func TestReview105SetSendCompressorBehindTheInterceptor(t *testing.T) {
	h := func(ctx context.Context, req *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		if err := grpc.SetSendCompressor(ctx, "gzip"); err != nil {
			return nil, grpcstatus.Error(codes.Internal, "SetSendCompressor: "+err.Error())
		}
		return wrapperspb.String("ok"), nil
	}
	plain := r105Server(t, false, h)
	if _, err, _ := r105Call(t, plain, "", grpc.UseCompressor("gzip")); err != nil {
		t.Fatalf("plain server: %v", err)
	}
	cc := r105Server(t, true, h)
	if _, err, _ := r105Call(t, cc, "", grpc.UseCompressor("gzip")); err != nil {
		t.Fatalf("unkeyed call behind the interceptor: %v", err)
	}
	if _, err, _ := r105Call(t, cc, "k2", grpc.UseCompressor("gzip")); err == nil {
		t.Errorf("keyed call: SetSendCompressor worked behind the interceptor: the package doc's limit is out of date")
	}

	before := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
		if err := grpc.SetSendCompressor(ctx, "gzip"); err != nil {
			return nil, grpcstatus.Error(codes.Internal, "SetSendCompressor: "+err.Error())
		}
		return next(ctx, req)
	}
	guard := grpcidempotency.UnaryServerInterceptor(idempotency.NewGuard(idempotency.NewMemoryStore(0)), grpcidempotency.SharedKeys())
	ok := func(context.Context, *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		return wrapperspb.String("ok"), nil
	}
	chained := r105Serve(t, ok, grpc.ChainUnaryInterceptor(before, guard))
	for i := range 2 { // the run and its replay
		if _, err, _ := r105Call(t, chained, "k3", grpc.UseCompressor("gzip")); err != nil {
			t.Errorf("call %d, the compressor set by an interceptor chained before: %v", i, err)
		}
	}
}
