package grpcidempotency_test

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/resiliencekit/resiliencekit/idempotency"
)

// r47Handler is the unary handler of the review service.
type r47Handler func(ctx context.Context, in *wrapperspb.StringValue) (any, error)

// r47Server is a real grpc-go server with one unary method (Do), a second
// unary method (Other), and a server stream (Stream), whose handlers the
// test sets.
type r47Server struct {
	addr string
	srv  *grpc.Server
	done chan struct{}
	mu   sync.Mutex
	h    r47Handler
	runs atomic.Int64
}

const (
	r47Do     = "/review47.Svc/Do"
	r47Other  = "/review47.Svc/Other"
	r47Stream = "/review47.Svc/Stream"
)

func (s *r47Server) handler() r47Handler {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.h
}

func (s *r47Server) set(h r47Handler) {
	s.mu.Lock()
	s.h = h
	s.mu.Unlock()
}

func r47Unary(method string) func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	return func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
		in := new(wrapperspb.StringValue)
		if err := dec(in); err != nil {
			return nil, err
		}
		s := srv.(*r47Server)
		h := func(ctx context.Context, req any) (any, error) {
			s.runs.Add(1)
			return s.handler()(ctx, req.(*wrapperspb.StringValue))
		}
		if interceptor == nil {
			return h(ctx, in)
		}
		return interceptor(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: method}, h)
	}
}

var r47Desc = grpc.ServiceDesc{
	ServiceName: "review47.Svc",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{
		{MethodName: "Do", Handler: r47Unary(r47Do)},
		{MethodName: "Other", Handler: r47Unary(r47Other)},
	},
	Streams: []grpc.StreamDesc{{
		StreamName: "Stream", ServerStreams: true, ClientStreams: true,
		Handler: func(srv any, ss grpc.ServerStream) error {
			s := srv.(*r47Server)
			s.runs.Add(1)
			for {
				in := new(wrapperspb.StringValue)
				if err := ss.RecvMsg(in); err == io.EOF {
					return nil
				} else if err != nil {
					return err
				}
				if err := ss.SendMsg(in); err != nil {
					return err
				}
			}
		},
	}},
}

// r47Start starts a server with the given options and handler.
func r47Start(t testing.TB, h r47Handler, opts ...grpc.ServerOption) *r47Server {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &r47Server{addr: lis.Addr().String(), srv: grpc.NewServer(opts...), done: make(chan struct{}), h: h}
	s.srv.RegisterService(&r47Desc, s)
	go func() { defer close(s.done); _ = s.srv.Serve(lis) }()
	t.Cleanup(func() { s.srv.Stop(); <-s.done })
	return s
}

func r47Dial(t testing.TB, addr string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient("passthrough:///"+addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// r47Answer is everything a client sees of a unary call.
type r47Answer struct {
	resp    *wrapperspb.StringValue
	err     error
	header  metadata.MD
	trailer metadata.MD
}

func r47Call(ctx context.Context, cc grpc.ClientConnInterface, method, key, in string, extra ...string) r47Answer {
	if key != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "idempotency-key", key)
	}
	if len(extra) > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, extra...)
	}
	var a r47Answer
	a.resp = new(wrapperspb.StringValue)
	a.err = cc.Invoke(ctx, method, wrapperspb.String(in), a.resp, grpc.Header(&a.header), grpc.Trailer(&a.trailer))
	return a
}

// r47Store wraps a MemoryStore (as a non-memory Store, so that the guard
// has local records to fail open to) with switchable faults.
type r47Store struct {
	mem          *idempotency.MemoryStore
	failBegin    atomic.Bool
	failComplete atomic.Bool
	failRenew    atomic.Bool
	failRelease  atomic.Bool
	hang         atomic.Bool // a failing call hangs until its ctx ends
	completes    atomic.Int64
}

var errR47Down = errors.New("review47: store down")

func newR47Store() *r47Store { return &r47Store{mem: idempotency.NewMemoryStore(0)} }

func (s *r47Store) fail(ctx context.Context) error {
	if s.hang.Load() {
		<-ctx.Done()
		return ctx.Err()
	}
	return errR47Down
}

func (s *r47Store) Begin(ctx context.Context, key string, claim idempotency.Record, lease time.Duration) (*idempotency.Record, error) {
	if s.failBegin.Load() {
		return nil, s.fail(ctx)
	}
	return s.mem.Begin(ctx, key, claim, lease)
}

func (s *r47Store) Renew(ctx context.Context, key string, claim idempotency.Record, lease time.Duration) error {
	if s.failRenew.Load() {
		return s.fail(ctx)
	}
	return s.mem.Renew(ctx, key, claim, lease)
}

func (s *r47Store) Complete(ctx context.Context, key string, claim, rec idempotency.Record, ttl time.Duration) error {
	s.completes.Add(1)
	if s.failComplete.Load() {
		return s.fail(ctx)
	}
	return s.mem.Complete(ctx, key, claim, rec, ttl)
}

func (s *r47Store) Release(ctx context.Context, key string, claim idempotency.Record) error {
	if s.failRelease.Load() {
		return s.fail(ctx)
	}
	return s.mem.Release(ctx, key, claim)
}

// r47Equal reports whether two proto messages are equal, nil-safe.
func r47Equal(a, b proto.Message) bool { return proto.Equal(a, b) }
