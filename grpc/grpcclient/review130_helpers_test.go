package grpcclient_test

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// r130 is a real grpc-go server on 127.0.0.1 with one unary method and
// one server-streaming method, whose handlers the test sets.
type r130 struct {
	addr   string
	srv    *grpc.Server
	unary  atomic.Value // func(ctx, *StringValue) (*StringValue, error)
	stream atomic.Value // func(*StringValue, grpc.ServerStream) error
	calls  atomic.Int64
	scalls atomic.Int64
	mu     sync.Mutex
	active int
	peak   int
}

type r130Unary func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error)
type r130Stream func(in *wrapperspb.StringValue, ss grpc.ServerStream) error

const (
	r130Get  = "/r130.Svc/Get"
	r130List = "/r130.Svc/List"
)

var r130ListDesc = &grpc.StreamDesc{StreamName: "List", ServerStreams: true}

func startR130(t *testing.T, opts ...grpc.ServerOption) *r130 {
	t.Helper()
	s := &r130{}
	s.unary.Store(r130Unary(func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		return wrapperspb.String("ok:" + in.GetValue()), nil
	}))
	s.stream.Store(r130Stream(func(in *wrapperspb.StringValue, ss grpc.ServerStream) error { return nil }))
	desc := grpc.ServiceDesc{
		ServiceName: "r130.Svc",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{MethodName: "Get", Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			h := func(ctx context.Context, req any) (any, error) {
				s.calls.Add(1)
				s.mu.Lock()
				s.active++
				s.peak = max(s.peak, s.active)
				s.mu.Unlock()
				defer func() { s.mu.Lock(); s.active--; s.mu.Unlock() }()
				return s.unary.Load().(r130Unary)(ctx, req.(*wrapperspb.StringValue))
			}
			if ic == nil {
				return h(ctx, in)
			}
			return ic(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: r130Get}, h)
		}}},
		Streams: []grpc.StreamDesc{{StreamName: "List", ServerStreams: true, Handler: func(srv any, ss grpc.ServerStream) error {
			s.scalls.Add(1)
			s.mu.Lock()
			s.active++
			s.peak = max(s.peak, s.active)
			s.mu.Unlock()
			defer func() { s.mu.Lock(); s.active--; s.mu.Unlock() }()
			in := new(wrapperspb.StringValue)
			if err := ss.RecvMsg(in); err != nil {
				return err
			}
			return s.stream.Load().(r130Stream)(in, ss)
		}}},
	}
	s.srv = grpc.NewServer(opts...)
	s.srv.RegisterService(&desc, struct{}{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.addr = lis.Addr().String()
	go func() { _ = s.srv.Serve(lis) }()
	t.Cleanup(s.srv.Stop)
	return s
}

func (s *r130) dial(t *testing.T, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(s.addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

func r130Call(ctx context.Context, cc *grpc.ClientConn, in string, opts ...grpc.CallOption) (string, error) {
	out := new(wrapperspb.StringValue)
	err := cc.Invoke(ctx, r130Get, wrapperspb.String(in), out, opts...)
	return out.GetValue(), err
}

func r130ListAll(ctx context.Context, cc *grpc.ClientConn, in string, opts ...grpc.CallOption) ([]string, error) {
	st, err := cc.NewStream(ctx, r130ListDesc, r130List, opts...)
	if err != nil {
		return nil, err
	}
	if err := st.SendMsg(wrapperspb.String(in)); err != nil {
		return nil, err
	}
	if err := st.CloseSend(); err != nil {
		return nil, err
	}
	var got []string
	for {
		m := new(wrapperspb.StringValue)
		if err := st.RecvMsg(m); err != nil {
			if err.Error() == "EOF" {
				return got, nil
			}
			return got, err
		}
		got = append(got, m.GetValue())
	}
}

var _ = time.Second
