package grpcsignal_test

import (
	"context"
	"errors"
	"io"
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
	"github.com/resiliencekit/resiliencekit/grpc/grpcsignal"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

const (
	r63Get  = "/r63.Hop/Get"
	r63List = "/r63.Hop/List"
)

type r63Impl struct {
	unary  func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error)
	stream func(in *wrapperspb.StringValue, ss grpc.ServerStream) error
}

func r63Desc() *grpc.ServiceDesc {
	return &grpc.ServiceDesc{
		ServiceName: "r63.Hop",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{MethodName: "Get", Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			h := func(ctx context.Context, req any) (any, error) {
				return srv.(*r63Impl).unary(ctx, req.(*wrapperspb.StringValue))
			}
			if ic == nil {
				return h(ctx, in)
			}
			return ic(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: r63Get}, h)
		}}},
		Streams: []grpc.StreamDesc{{StreamName: "List", ServerStreams: true, Handler: func(srv any, ss grpc.ServerStream) error {
			in := new(wrapperspb.StringValue)
			if err := ss.RecvMsg(in); err != nil {
				return err
			}
			return srv.(*r63Impl).stream(in, ss)
		}}},
	}
}

func r63Serve(t *testing.T, impl *r63Impl) string {
	lis := listen(t)
	s := grpc.NewServer(grpc.ChainUnaryInterceptor(grpcsignal.UnaryServerInterceptor),
		grpc.ChainStreamInterceptor(grpcsignal.StreamServerInterceptor))
	s.RegisterService(r63Desc(), impl)
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}

func r63Pipe(b *breaker.Breaker) *pipeline.Pipeline {
	opts := []pipeline.Option{pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3),
		retrypolicy.BaseDelay(time.Millisecond), retrypolicy.MaxDelay(2*time.Millisecond)))}
	if b != nil {
		opts = append(opts, pipeline.WithBreaker(b))
	}
	return pipeline.New(opts...)
}

func r63Dial(t *testing.T, addr string, b *breaker.Breaker) *grpc.ClientConn {
	ic := grpcclient.New(grpcclient.WithPipeline(r63Pipe(b)), grpcclient.RetryMethods(r63Get, r63List))
	opts := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, ic.DialOptions()...)
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

var r63StreamDesc = &grpc.StreamDesc{StreamName: "List", ServerStreams: true}

// r63Hop forwards Get and List to next through a retrying grpcclient.
func r63Hop(t *testing.T, next string) string {
	cc := r63Dial(t, next, nil)
	return r63Serve(t, &r63Impl{
		unary: func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
			out := new(wrapperspb.StringValue)
			if err := cc.Invoke(ctx, r63Get, in, out); err != nil {
				return nil, err
			}
			return out, nil
		},
		stream: func(in *wrapperspb.StringValue, ss grpc.ServerStream) error {
			cs, err := cc.NewStream(ss.Context(), r63StreamDesc, r63List)
			if err != nil {
				return err
			}
			if err := cs.SendMsg(in); err != nil && !errors.Is(err, io.EOF) {
				return err
			}
			_ = cs.CloseSend()
			for {
				m := new(wrapperspb.StringValue)
				if err := cs.RecvMsg(m); err != nil {
					if errors.Is(err, io.EOF) {
						return nil
					}
					return err
				}
				if err := ss.SendMsg(m); err != nil {
					return err
				}
			}
		},
	})
}

func r63Dead(t *testing.T, n *atomic.Int64, code codes.Code) string {
	return r63Serve(t, &r63Impl{
		unary: func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
			n.Add(1)
			return nil, status.Error(code, "down")
		},
		stream: func(in *wrapperspb.StringValue, ss grpc.ServerStream) error {
			n.Add(1)
			return status.Error(code, "down")
		},
	})
}

func r63Chain(t *testing.T, d string, hops int) string {
	top := d
	for range hops {
		top = r63Hop(t, top)
	}
	return top
}

func TestReview63_GRPCUnaryChain(t *testing.T) {
	for _, code := range []codes.Code{codes.Unavailable, codes.ResourceExhausted, codes.DeadlineExceeded} {
		var n atomic.Int64
		top := r63Chain(t, r63Dead(t, &n, code), 6)
		cc := r63Dial(t, top, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		var tr metadata.MD
		err := cc.Invoke(ctx, r63Get, wrapperspb.String("x"), new(wrapperspb.StringValue), grpc.Trailer(&tr))
		cancel()
		t.Logf("%v: user got %v trailer %v; D got %d", code, status.Code(err), tr[grpcsignal.PushbackKey], n.Load())
		if n.Load() > 3 {
			t.Errorf("%v: D got %d requests, want <= 3", code, n.Load())
		}
	}
}

func TestReview63_GRPCStreamChain(t *testing.T) {
	var n atomic.Int64
	top := r63Chain(t, r63Dead(t, &n, codes.Unavailable), 5)
	cc := r63Dial(t, top, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var tr metadata.MD
	cs, err := cc.NewStream(ctx, r63StreamDesc, r63List, grpc.Trailer(&tr))
	if err == nil {
		_ = cs.SendMsg(wrapperspb.String("x"))
		_ = cs.CloseSend()
		err = cs.RecvMsg(new(wrapperspb.StringValue))
	}
	t.Logf("user got %v trailer %v; D got %d", status.Code(err), tr[grpcsignal.PushbackKey], n.Load())
	if n.Load() > 3 {
		t.Errorf("D got %d stream requests, want <= 3", n.Load())
	}
}

// A hop whose handler never called out and answers UNAVAILABLE of its own
// (one attempt, nobody retried): its caller must retry it, and the caller's
// retry reaches a healthy second answer.
func TestReview63_GRPCOwnUnavailableIsRetried(t *testing.T) {
	var n atomic.Int64
	addr := r63Serve(t, &r63Impl{unary: func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		if n.Add(1) == 1 {
			return nil, status.Error(codes.Unavailable, "blip")
		}
		return in, nil
	}})
	cc := r63Dial(t, addr, nil)
	err := cc.Invoke(context.Background(), r63Get, wrapperspb.String("x"), new(wrapperspb.StringValue))
	if err != nil {
		t.Fatalf("a blip failed the call: %v", err)
	}
}
