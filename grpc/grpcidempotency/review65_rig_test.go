package grpcidempotency_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/resiliencekit/resiliencekit/grpc/grpcidempotency"
	"github.com/resiliencekit/resiliencekit/idempotency"
)

const r65Method = "/review65.Svc/Do"
const r65Other = "/review65.Svc/Other"

type r65Handler func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error)

type r65Rig struct {
	runs atomic.Int64
	h    atomic.Pointer[r65Handler]
	addr string
	srv  *grpc.Server
}

func r65Desc(method string) grpc.MethodDesc {
	return grpc.MethodDesc{MethodName: method[len("/review65.Svc/"):], Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
		in := new(wrapperspb.StringValue)
		if err := dec(in); err != nil {
			return nil, err
		}
		r := srv.(*r65Rig)
		h := func(ctx context.Context, req any) (any, error) {
			r.runs.Add(1)
			return (*r.h.Load())(ctx, req.(*wrapperspb.StringValue))
		}
		if ic == nil {
			return h(ctx, in)
		}
		return ic(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: method}, h)
	}}
}

// r65Start starts a server; guard nil and plain=true means no interceptor.
func r65Start(t testing.TB, guard *idempotency.Guard, plain bool, h r65Handler) *r65Rig {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var opts []grpc.ServerOption
	if !plain {
		opts = append(opts, grpc.ChainUnaryInterceptor(grpcidempotency.UnaryServerInterceptor(guard, grpcidempotency.SharedKeys())))
	}
	r := &r65Rig{addr: lis.Addr().String(), srv: grpc.NewServer(opts...)}
	r.h.Store(&h)
	r.srv.RegisterService(&grpc.ServiceDesc{ServiceName: "review65.Svc", HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{r65Desc(r65Method), r65Desc(r65Other)}}, r)
	go r.srv.Serve(lis)
	t.Cleanup(r.srv.Stop)
	return r
}

func (r *r65Rig) dial(t testing.TB, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient("passthrough:///"+r.addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

func r65Call(ctx context.Context, cc *grpc.ClientConn, method, key, in string, opts ...grpc.CallOption) (string, error) {
	if key != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "idempotency-key", key)
	}
	out := new(wrapperspb.StringValue)
	err := cc.Invoke(ctx, method, wrapperspb.String(in), out, opts...)
	return out.GetValue(), err
}
