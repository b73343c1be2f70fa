// Package grpctest is a fake gRPC backend whose faults can be switched at
// run time, as package chaos is for HTTP: a test service with a unary,
// a server-streaming, a client-streaming and a bidirectional method, on a
// real grpc-go server over TCP on 127.0.0.1, which records every call it
// gets.
//
// The service, resiliencekit.grpctest.Echo, is described by a file
// descriptor built in code and registered in protoregistry.GlobalFiles, so
// that a client can read its methods' idempotency_level; its messages are
// google.protobuf.StringValue:
//
//   - Get (unary, NO_SIDE_EFFECTS) answers "get:" and its request;
//   - Create (unary, no idempotency level) answers "created:" and its
//     request;
//   - List (server streaming, NO_SIDE_EFFECTS) sends its request and
//     "-0", "-1", ... up to [Server.Items] messages;
//   - Upload (client streaming, IDEMPOTENT) answers the messages it got,
//     joined by ",";
//   - Chat (bidirectional, IDEMPOTENT) echoes each message back.
//
// A [Fault] set on a method ([Server.SetFault]) makes its next calls, or
// all of them, wait and fail with a status code, a pushback trailer, and,
// for a stream, after so many messages.
package grpctest

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Service is the full name of the test service.
const Service = "resiliencekit.grpctest.Echo"

// The full method names of the test service, as grpc-go names them.
const (
	Get    = "/" + Service + "/Get"
	Create = "/" + Service + "/Create"
	List   = "/" + Service + "/List"
	Upload = "/" + Service + "/Upload"
	Chat   = "/" + Service + "/Chat"
)

func init() {
	level := func(l descriptorpb.MethodOptions_IdempotencyLevel) *descriptorpb.MethodOptions {
		return &descriptorpb.MethodOptions{IdempotencyLevel: l.Enum()}
	}
	method := func(name string, client, server bool, opts *descriptorpb.MethodOptions) *descriptorpb.MethodDescriptorProto {
		return &descriptorpb.MethodDescriptorProto{
			Name:            proto.String(name),
			InputType:       proto.String(".google.protobuf.StringValue"),
			OutputType:      proto.String(".google.protobuf.StringValue"),
			ClientStreaming: proto.Bool(client),
			ServerStreaming: proto.Bool(server),
			Options:         opts,
		}
	}
	fdp := &descriptorpb.FileDescriptorProto{
		Name:       proto.String("resiliencekit/grpctest/echo.proto"),
		Package:    proto.String("resiliencekit.grpctest"),
		Syntax:     proto.String("proto3"),
		Dependency: []string{"google/protobuf/wrappers.proto"},
		Service: []*descriptorpb.ServiceDescriptorProto{{
			Name: proto.String("Echo"),
			Method: []*descriptorpb.MethodDescriptorProto{
				method("Get", false, false, level(descriptorpb.MethodOptions_NO_SIDE_EFFECTS)),
				method("Create", false, false, nil),
				method("List", false, true, level(descriptorpb.MethodOptions_NO_SIDE_EFFECTS)),
				method("Upload", true, false, level(descriptorpb.MethodOptions_IDEMPOTENT)),
				method("Chat", true, true, level(descriptorpb.MethodOptions_IDEMPOTENT)),
			},
		}},
	}
	fd, err := protodesc.NewFile(fdp, protoregistry.GlobalFiles)
	if err != nil {
		panic(fmt.Sprintf("grpctest: build the descriptor: %v", err))
	}
	if err := protoregistry.GlobalFiles.RegisterFile(fd); err != nil {
		panic(fmt.Sprintf("grpctest: register the descriptor: %v", err))
	}
}

// Fault is how a method misbehaves. The zero Fault is none.
type Fault struct {
	// Code is the status a faulty call ends with; codes.OK with a Delay
	// makes a slow call that succeeds.
	Code codes.Code
	// Message is the status message. Default "injected fault".
	Message string
	// Calls is how many calls are faulty before the method works again;
	// 0 makes every call faulty until the fault is changed.
	Calls int
	// Delay is how long a faulty call waits, within its deadline, before
	// it fails (or, with codes.OK, answers).
	Delay time.Duration
	// Pushback, if not "", is sent as the grpc-retry-pushback-ms trailer.
	Pushback string
	// After is how many messages a faulty stream sends (List, Chat) or
	// receives (Upload) before it fails: 0 fails it before its first.
	After int
}

// Call is what the server saw of one call.
type Call struct {
	// Method is the full method name.
	Method string
	// Metadata is the request's header.
	Metadata metadata.MD
	// Received is the request messages, in order.
	Received []string
	// Deadline is how much time the call had left when it arrived; 0 if
	// it had no deadline.
	Deadline time.Duration
	// Code is the status it ended with.
	Code codes.Code
}

// Server is the test service on 127.0.0.1. It is safe for concurrent use.
type Server struct {
	// Addr is the address it listens on, "127.0.0.1:port".
	Addr string
	// Items is how many messages List sends. Default 3. Set it before
	// the calls it is for.
	Items int

	srv    *grpc.Server
	done   chan struct{}
	mu     sync.Mutex
	faults map[string]*Fault
	calls  map[string][]*Call
}

// Start starts a Server on 127.0.0.1 at a free port, with opts (such as
// interceptors). Stop it with [Server.Close].
func Start(opts ...grpc.ServerOption) (*Server, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Server{
		Addr:   lis.Addr().String(),
		Items:  3,
		srv:    grpc.NewServer(opts...),
		done:   make(chan struct{}),
		faults: map[string]*Fault{},
		calls:  map[string][]*Call{},
	}
	s.srv.RegisterService(&serviceDesc, s)
	go func() {
		defer close(s.done)
		_ = s.srv.Serve(lis)
	}()
	return s, nil
}

// Close stops the server at once, ending the calls in flight, and waits
// for it.
func (s *Server) Close() {
	s.srv.Stop()
	<-s.done
}

// SetFault makes method (a full name, such as [Get]) misbehave as f; the
// zero Fault clears it.
func (s *Server) SetFault(method string, f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f == (Fault{}) {
		delete(s.faults, method)
		return
	}
	s.faults[method] = &f
}

// Calls returns copies of the calls method got, in the order they came.
func (s *Server) Calls(method string) []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Call, len(s.calls[method]))
	for i, c := range s.calls[method] {
		out[i] = *c
		out[i].Received = append([]string(nil), c.Received...)
	}
	return out
}

// Count returns how many calls method got.
func (s *Server) Count(method string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.calls[method])
}

// Reset forgets the calls and clears the faults.
func (s *Server) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.faults)
	clear(s.calls)
}

// begin records a call and returns it with its fault, if it has one.
func (s *Server) begin(ctx context.Context, method string) (*Call, *Fault) {
	md, _ := metadata.FromIncomingContext(ctx)
	c := &Call{Method: method, Metadata: md}
	if d, ok := ctx.Deadline(); ok {
		c.Deadline = time.Until(d)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls[method] = append(s.calls[method], c)
	f := s.faults[method]
	if f == nil {
		return c, nil
	}
	out := *f
	if f.Calls > 0 {
		if f.Calls--; f.Calls == 0 {
			delete(s.faults, method)
		}
	}
	return c, &out
}

// received records a request message of c.
func (s *Server) received(c *Call, m string) {
	s.mu.Lock()
	c.Received = append(c.Received, m)
	s.mu.Unlock()
}

// end records how c ended and returns err.
func (s *Server) end(c *Call, err error) error {
	s.mu.Lock()
	c.Code = status.Code(err)
	s.mu.Unlock()
	return err
}

// fail waits out f's delay and returns its error, nil for a slow
// success, setting its pushback trailer.
func fail(ctx context.Context, f *Fault) error {
	if f.Delay > 0 {
		t := time.NewTimer(f.Delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return status.FromContextError(ctx.Err()).Err()
		case <-t.C:
		}
	}
	if f.Code == codes.OK {
		return nil
	}
	if f.Pushback != "" {
		_ = grpc.SetTrailer(ctx, metadata.Pairs("grpc-retry-pushback-ms", f.Pushback))
	}
	msg := f.Message
	if msg == "" {
		msg = "injected fault"
	}
	return status.Error(f.Code, msg)
}

func (s *Server) unary(ctx context.Context, method, prefix string, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
	c, f := s.begin(ctx, method)
	s.received(c, in.GetValue())
	if f != nil {
		if err := fail(ctx, f); err != nil {
			return nil, s.end(c, err)
		}
	}
	return wrapperspb.String(prefix + in.GetValue()), s.end(c, nil)
}

func (s *Server) list(in *wrapperspb.StringValue, ss grpc.ServerStream) error {
	c, f := s.begin(ss.Context(), List)
	s.received(c, in.GetValue())
	s.mu.Lock()
	items := s.Items
	s.mu.Unlock()
	for i := range items {
		if f != nil && i == f.After {
			if err := fail(ss.Context(), f); err != nil {
				return s.end(c, err)
			}
		}
		if err := ss.SendMsg(wrapperspb.String(fmt.Sprintf("%s-%d", in.GetValue(), i))); err != nil {
			return s.end(c, err)
		}
	}
	return s.end(c, nil)
}

func (s *Server) upload(ss grpc.ServerStream) error {
	c, f := s.begin(ss.Context(), Upload)
	var got []string
	for {
		if f != nil && len(got) == f.After {
			if err := fail(ss.Context(), f); err != nil {
				return s.end(c, err)
			}
		}
		in := new(wrapperspb.StringValue)
		err := ss.RecvMsg(in)
		if err == io.EOF {
			break
		}
		if err != nil {
			return s.end(c, err)
		}
		got = append(got, in.GetValue())
		s.received(c, in.GetValue())
	}
	return s.end(c, ss.SendMsg(wrapperspb.String(strings.Join(got, ","))))
}

func (s *Server) chat(ss grpc.ServerStream) error {
	c, f := s.begin(ss.Context(), Chat)
	for n := 0; ; n++ {
		if f != nil && n == f.After {
			if err := fail(ss.Context(), f); err != nil {
				return s.end(c, err)
			}
		}
		in := new(wrapperspb.StringValue)
		err := ss.RecvMsg(in)
		if err == io.EOF {
			return s.end(c, nil)
		}
		if err != nil {
			return s.end(c, err)
		}
		s.received(c, in.GetValue())
		if err := ss.SendMsg(in); err != nil {
			return s.end(c, err)
		}
	}
}

func unaryHandler(method, prefix string) func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	return func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
		in := new(wrapperspb.StringValue)
		if err := dec(in); err != nil {
			return nil, err
		}
		h := func(ctx context.Context, req any) (any, error) {
			return srv.(*Server).unary(ctx, method, prefix, req.(*wrapperspb.StringValue))
		}
		if interceptor == nil {
			return h(ctx, in)
		}
		return interceptor(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: method}, h)
	}
}

var serviceDesc = grpc.ServiceDesc{
	ServiceName: Service,
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{
		{MethodName: "Get", Handler: unaryHandler(Get, "get:")},
		{MethodName: "Create", Handler: unaryHandler(Create, "created:")},
	},
	Streams: []grpc.StreamDesc{
		{StreamName: "List", ServerStreams: true, Handler: func(srv any, ss grpc.ServerStream) error {
			in := new(wrapperspb.StringValue)
			if err := ss.RecvMsg(in); err != nil {
				return err
			}
			return srv.(*Server).list(in, ss)
		}},
		{StreamName: "Upload", ClientStreams: true, Handler: func(srv any, ss grpc.ServerStream) error {
			return srv.(*Server).upload(ss)
		}},
		{StreamName: "Chat", ServerStreams: true, ClientStreams: true, Handler: func(srv any, ss grpc.ServerStream) error {
			return srv.(*Server).chat(ss)
		}},
	},
	Metadata: "resiliencekit/grpctest/echo.proto",
}

// ListDesc, UploadDesc and ChatDesc describe the streaming methods, for
// grpc.ClientConn.NewStream.
var (
	ListDesc   = &grpc.StreamDesc{StreamName: "List", ServerStreams: true}
	UploadDesc = &grpc.StreamDesc{StreamName: "Upload", ClientStreams: true}
	ChatDesc   = &grpc.StreamDesc{StreamName: "Chat", ServerStreams: true, ClientStreams: true}
)

// Dial returns a client connection to addr without TLS, with opts.
func Dial(addr string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	return grpc.NewClient("passthrough:///"+addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
}

// Client calls the test service; its methods are safe for concurrent use.
type Client struct {
	cc grpc.ClientConnInterface
}

// NewClient returns a Client on cc.
func NewClient(cc grpc.ClientConnInterface) *Client { return &Client{cc: cc} }

func (c *Client) unary(ctx context.Context, method, in string, opts []grpc.CallOption) (string, error) {
	out := new(wrapperspb.StringValue)
	err := c.cc.Invoke(ctx, method, wrapperspb.String(in), out, opts...)
	return out.GetValue(), err
}

// Get calls Get.
func (c *Client) Get(ctx context.Context, in string, opts ...grpc.CallOption) (string, error) {
	return c.unary(ctx, Get, in, opts)
}

// Create calls Create.
func (c *Client) Create(ctx context.Context, in string, opts ...grpc.CallOption) (string, error) {
	return c.unary(ctx, Create, in, opts)
}

// List calls List and returns the messages it got before the stream ended,
// and its error (nil at a successful end).
func (c *Client) List(ctx context.Context, in string, opts ...grpc.CallOption) ([]string, error) {
	st, err := c.cc.NewStream(ctx, ListDesc, List, opts...)
	if err != nil {
		return nil, err
	}
	if err := st.SendMsg(wrapperspb.String(in)); err != nil && err != io.EOF {
		return nil, err // io.EOF: the stream ended, its status comes from RecvMsg
	}
	if err := st.CloseSend(); err != nil {
		return nil, err
	}
	return recvAll(st)
}

// Upload sends ins on Upload and returns its answer.
func (c *Client) Upload(ctx context.Context, ins []string, opts ...grpc.CallOption) (string, error) {
	st, err := c.cc.NewStream(ctx, UploadDesc, Upload, opts...)
	if err != nil {
		return "", err
	}
	for _, in := range ins {
		if err := st.SendMsg(wrapperspb.String(in)); err == io.EOF {
			break
		} else if err != nil {
			return "", err
		}
	}
	if err := st.CloseSend(); err != nil {
		return "", err
	}
	out := new(wrapperspb.StringValue)
	if err := st.RecvMsg(out); err != nil {
		return "", err
	}
	return out.GetValue(), nil
}

// Chat sends ins on Chat, closes its sending side, and returns the
// messages it got back before the stream ended, and its error.
func (c *Client) Chat(ctx context.Context, ins []string, opts ...grpc.CallOption) ([]string, error) {
	st, err := c.cc.NewStream(ctx, ChatDesc, Chat, opts...)
	if err != nil {
		return nil, err
	}
	for _, in := range ins {
		if err := st.SendMsg(wrapperspb.String(in)); err == io.EOF {
			break
		} else if err != nil {
			return nil, err
		}
	}
	if err := st.CloseSend(); err != nil {
		return nil, err
	}
	return recvAll(st)
}

func recvAll(st grpc.ClientStream) ([]string, error) {
	var got []string
	for {
		out := new(wrapperspb.StringValue)
		err := st.RecvMsg(out)
		if err == io.EOF {
			return got, nil
		}
		if err != nil {
			return got, err
		}
		got = append(got, out.GetValue())
	}
}
