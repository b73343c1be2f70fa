package grpcsignal_test

// review164: a chain A -> B -> C -> D of real grpc-go servers, each hop
// with its own client (resilient or plain) and handler style, to check
// that D sees at most the attempts of one layer.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/resiliencekit/resiliencekit/grpc/grpcclient"
	"github.com/resiliencekit/resiliencekit/grpc/grpcsignal"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

const (
	r164Service = "r164.Chain"
	r164Call    = "/" + r164Service + "/Call"
	r164Watch   = "/" + r164Service + "/Watch"
	r164Attempt = 4 // attempts per resilient layer
)

// r164Next is what a hop's handler calls: the next hop, unary or stream.
type r164Backend interface {
	call(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error)
	watch(in *wrapperspb.StringValue, ss grpc.ServerStream) error
}

func r164Desc(b r164Backend) *grpc.ServiceDesc {
	return &grpc.ServiceDesc{
		ServiceName: r164Service,
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "Call",
			Handler: func(_ any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
				in := new(wrapperspb.StringValue)
				if err := dec(in); err != nil {
					return nil, err
				}
				h := func(ctx context.Context, req any) (any, error) {
					return b.call(ctx, req.(*wrapperspb.StringValue))
				}
				if ic == nil {
					return h(ctx, in)
				}
				return ic(ctx, in, &grpc.UnaryServerInfo{FullMethod: r164Call}, h)
			},
		}},
		Streams: []grpc.StreamDesc{{
			StreamName:    "Watch",
			ServerStreams: true,
			Handler: func(_ any, ss grpc.ServerStream) error {
				in := new(wrapperspb.StringValue)
				if err := ss.RecvMsg(in); err != nil {
					return err
				}
				return b.watch(in, ss)
			},
		}},
	}
}

// r164Leaf is D: it counts calls and answers as told.
type r164Leaf struct {
	calls    atomic.Int64
	code     codes.Code
	st       *status.Status // if set, the answer (details)
	trailer  metadata.MD    // set on every answer
	header   bool           // stream: send headers (commit) before failing
	messages int            // stream: send this many messages before failing
	hang     bool           // wait for ctx end
	okAfter  int64          // succeed from this call on (0: never)
	delay    time.Duration  // wait before answering
}

func (l *r164Leaf) answer(ctx context.Context) error {
	n := l.calls.Add(1)
	if l.trailer != nil {
		_ = grpc.SetTrailer(ctx, l.trailer)
	}
	if l.delay > 0 {
		select {
		case <-ctx.Done():
		case <-time.After(l.delay):
		}
	}
	if l.hang {
		<-ctx.Done()
		return status.FromContextError(ctx.Err()).Err()
	}
	if l.okAfter > 0 && n >= l.okAfter {
		return nil
	}
	if l.st != nil {
		return l.st.Err()
	}
	if l.code == codes.OK {
		return nil
	}
	return status.Error(l.code, "leaf says "+l.code.String())
}

func (l *r164Leaf) call(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
	if err := l.answer(ctx); err != nil {
		return nil, err
	}
	return wrapperspb.String("leaf:" + in.GetValue()), nil
}

func (l *r164Leaf) watch(in *wrapperspb.StringValue, ss grpc.ServerStream) error {
	if l.header {
		_ = ss.SendHeader(metadata.Pairs("x-leaf", "1"))
	}
	for i := 0; i < l.messages; i++ {
		if err := ss.SendMsg(wrapperspb.String(fmt.Sprint("m", i))); err != nil {
			return err
		}
	}
	if err := l.answer(ss.Context()); err != nil {
		return err
	}
	return ss.SendMsg(wrapperspb.String("leaf:" + in.GetValue()))
}

// handler styles of a hop: how it returns its outbound call's error.
type r164Style int

const (
	r164Raw      r164Style = iota // return err
	r164Wrapped                   // fmt.Errorf("...: %w", err)
	r164Joined                    // errors.Join(errors.New(..), err)
	r164Convert                   // status.Convert(err).Err()
	r164Internal                  // status.Error(codes.Internal, ...) of its own
)

// r164Hop is a service whose handler calls next through cc.
type r164Hop struct {
	cc     *grpc.ClientConn
	style  r164Style
	served atomic.Int64
}

func (h *r164Hop) wrap(err error) error {
	if err == nil {
		return nil
	}
	switch h.style {
	case r164Wrapped:
		return fmt.Errorf("hop: calling next: %w", err)
	case r164Joined:
		return errors.Join(errors.New("hop failed"), err)
	case r164Convert:
		return status.Convert(err).Err()
	case r164Internal:
		return status.Error(codes.Internal, "hop: next failed: "+err.Error())
	}
	return err
}

func (h *r164Hop) call(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
	h.served.Add(1)
	out := new(wrapperspb.StringValue)
	if err := h.cc.Invoke(ctx, r164Call, in, out); err != nil {
		return nil, h.wrap(err)
	}
	return out, nil
}

func (h *r164Hop) watch(in *wrapperspb.StringValue, ss grpc.ServerStream) error {
	h.served.Add(1)
	cs, err := h.cc.NewStream(ss.Context(), &grpc.StreamDesc{StreamName: "Watch", ServerStreams: true}, r164Watch)
	if err != nil {
		return h.wrap(err)
	}
	if err := cs.SendMsg(in); err != nil && err != io.EOF {
		return h.wrap(err)
	}
	if err := cs.CloseSend(); err != nil {
		return h.wrap(err)
	}
	for {
		m := new(wrapperspb.StringValue)
		if err := cs.RecvMsg(m); err != nil {
			if err == io.EOF {
				return nil
			}
			return h.wrap(err)
		}
		if err := ss.SendMsg(m); err != nil {
			return err
		}
	}
}

// r164Net makes listeners: bufconn or TCP.
type r164Net struct {
	tcp bool
}

type r164Server struct {
	srv    *grpc.Server
	target string
	dial   []grpc.DialOption
}

func (n r164Net) serve(t *testing.T, b r164Backend, interceptors bool, sopts ...grpc.ServerOption) *r164Server {
	t.Helper()
	if interceptors {
		sopts = append(sopts, grpc.ChainUnaryInterceptor(grpcsignal.UnaryServerInterceptor), grpc.ChainStreamInterceptor(grpcsignal.StreamServerInterceptor))
	}
	srv := grpc.NewServer(sopts...)
	srv.RegisterService(r164Desc(b), nil)
	s := &r164Server{srv: srv}
	if n.tcp {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		s.target = "passthrough:///" + lis.Addr().String()
		go srv.Serve(lis)
	} else {
		lis := bufconn.Listen(1 << 20)
		s.target = "passthrough:///bufnet"
		s.dial = []grpc.DialOption{grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) })}
		go srv.Serve(lis)
	}
	t.Cleanup(srv.Stop)
	return s
}

// r164Pipeline is a fast retrying pipeline of r164Attempt attempts.
func r164Pipeline(opts ...pipeline.Option) *pipeline.Pipeline {
	base := []pipeline.Option{pipeline.WithRetry(retrypolicy.New(
		retrypolicy.MaxAttempts(r164Attempt), retrypolicy.BaseDelay(time.Millisecond), retrypolicy.MaxDelay(5*time.Millisecond)))}
	return pipeline.New(append(base, opts...)...)
}

// r164Counter counts attempts that leave a conn (installed after the
// resilient interceptor, so it sees each attempt).
type r164Counter struct{ n atomic.Int64 }

func (c *r164Counter) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	c.n.Add(1)
	return invoker(ctx, method, req, reply, cc, opts...)
}

func (c *r164Counter) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	c.n.Add(1)
	return streamer(ctx, desc, cc, method, opts...)
}

// r164Dial connects to s: resilient (grpcclient with r164Pipeline) or
// plain grpc-go; cnt, if not nil, counts each attempt.
func r164Dial(t *testing.T, s *r164Server, resilient bool, cnt *r164Counter, iopts ...grpcclient.Option) *grpc.ClientConn {
	t.Helper()
	opts := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, s.dial...)
	if resilient {
		base := []grpcclient.Option{grpcclient.WithPipeline(r164Pipeline()), grpcclient.RetryMethods(r164Call, r164Watch)}
		opts = append(opts, grpcclient.New(append(base, iopts...)...).DialOptions()...)
	}
	if cnt != nil {
		opts = append(opts, grpc.WithChainUnaryInterceptor(cnt.unary), grpc.WithChainStreamInterceptor(cnt.stream))
	}
	cc, err := grpc.NewClient(s.target, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// r164HopSpec describes hops B and C.
type r164HopSpec struct {
	resilient    bool // its client to the next hop
	interceptors bool // grpcsignal's server interceptors on it
	style        r164Style
}

type r164Chain struct {
	leaf   *r164Leaf
	hops   []*r164Hop
	a      *grpc.ClientConn // A's client to B (resilient)
	toLeaf *r164Counter     // attempts that C sent to D
}

// r164Build builds A -> hops... -> D; hops[0] is B, the last is C.
func r164Build(t *testing.T, n r164Net, leaf *r164Leaf, aResilient bool, hops ...r164HopSpec) *r164Chain {
	t.Helper()
	ch := &r164Chain{leaf: leaf, toLeaf: new(r164Counter)}
	next := n.serve(t, leaf, false)
	var cnt *r164Counter = ch.toLeaf
	for i := len(hops) - 1; i >= 0; i-- {
		cc := r164Dial(t, next, hops[i].resilient, cnt)
		cnt = nil
		h := &r164Hop{cc: cc, style: hops[i].style}
		ch.hops = append([]*r164Hop{h}, ch.hops...)
		next = n.serve(t, h, hops[i].interceptors)
	}
	ch.a = r164Dial(t, next, aResilient, nil)
	return ch
}

func (ch *r164Chain) unary(ctx context.Context) (*wrapperspb.StringValue, error) {
	out := new(wrapperspb.StringValue)
	err := ch.a.Invoke(ctx, r164Call, wrapperspb.String("x"), out)
	return out, err
}

func (ch *r164Chain) watch(ctx context.Context) ([]string, error) {
	cs, err := ch.a.NewStream(ctx, &grpc.StreamDesc{StreamName: "Watch", ServerStreams: true}, r164Watch)
	if err != nil {
		return nil, err
	}
	if err := cs.SendMsg(wrapperspb.String("x")); err != nil && err != io.EOF {
		return nil, err
	}
	_ = cs.CloseSend()
	var got []string
	for {
		m := new(wrapperspb.StringValue)
		if err := cs.RecvMsg(m); err != nil {
			if err == io.EOF {
				return got, nil
			}
			return got, err
		}
		got = append(got, m.GetValue())
	}
}

func r164Toolkit(style r164Style) r164HopSpec {
	return r164HopSpec{resilient: true, interceptors: true, style: style}
}
