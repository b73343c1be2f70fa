package main

import (
	"context"
	"fmt"
	"net"
	"strconv"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/resiliencekit/resiliencekit/grpc/grpcclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
)

// gRPC transports: the backends behind gRPC servers, for grpc-go's own
// retry policy (TestGRPCModelMatchesGRPCGo, TestRealTimeGRPC) and for
// every strategy in real time (-grpc), the Pipeline's through grpcclient.

// rawCodec passes bytes as they are, so that no generated code is needed.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(b []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), b...)
	return nil
}
func (rawCodec) Name() string { return "storm-raw" }

// grpcGoServiceConfig is the service config grpcRetry models.
func grpcGoServiceConfig(throttled bool) string {
	c := fmt.Sprintf(`{"methodConfig": [{"name": [{"service": "storm.Backend"}],
  "retryPolicy": {"maxAttempts": %d, "initialBackoff": "0.1s", "maxBackoff": "1s", "backoffMultiplier": %d,
    "retryableStatusCodes": ["UNAVAILABLE"]}}]`, grpcMaxAttempts, grpcMultiplier)
	if throttled {
		c += fmt.Sprintf(`, "retryThrottling": {"maxTokens": %d, "tokenRatio": %v}`, grpcMaxTokens, grpcTokenRatio)
	}
	return c + "}"
}

// grpcGoTransport is grpc-go itself: each backend behind a gRPC server, in
// memory (bufconn) or over TCP on 127.0.0.1, called through a channel with
// the service config that grpcRetry models. The attempt's number comes from the
// grpc-previous-rpc-attempts header grpc-go sends on a retry.
func grpcGoTransport(throttled, overTCP bool) transport {
	return transport{attempts: grpcTransport(grpcGoServiceConfig(throttled), grpcLocal(overTCP))}
}

// grpcTarget is where a gRPC transport's RPCs reach a backend: the address
// to dial (through dialer, if set), the metadata that names the backend
// there (key, value...: none for a server of its own), and how to stop.
type grpcTarget struct {
	addr   string
	dialer func(ctx context.Context, addr string) (net.Conn, error)
	md     []string
	stop   func()
}

// grpcLocal puts each backend behind a gRPC server of its own, in memory
// (bufconn) or over TCP on 127.0.0.1.
func grpcLocal(overTCP bool) func(b *backend) grpcTarget {
	return func(b *backend) grpcTarget {
		lis, stop := serveGRPC(b, overTCP)
		t := grpcTarget{addr: lis.Addr().String(), stop: stop}
		if bl, ok := lis.(*bufconn.Listener); ok {
			t.dialer = func(ctx context.Context, _ string) (net.Conn, error) { return bl.DialContext(ctx) }
		}
		return t
	}
}

// dial returns a channel to t: with grpc-go's retry as serviceConfig
// configures it, or off ("") and opts.
func (t grpcTarget) dial(serviceConfig string, opts ...grpc.DialOption) *grpc.ClientConn {
	opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if t.dialer != nil {
		opts = append(opts, grpc.WithContextDialer(t.dialer))
	}
	if serviceConfig != "" {
		opts = append(opts, grpc.WithDefaultServiceConfig(serviceConfig))
	} else {
		opts = append(opts, grpc.WithDisableRetry())
	}
	cc, err := grpc.NewClient("passthrough:///"+t.addr, opts...)
	if err != nil {
		panic(err)
	}
	return cc
}

// grpcStorm is the -grpc transport: each backend behind a gRPC server over
// TCP on 127.0.0.1. The Pipeline's strategies call it through
// grpcclient's interceptor (grpcPipeline); the others through a channel
// without grpc-go's retry, one RPC per attempt of the strategy's own
// (grpcPlain).
var grpcStorm = grpcVia(grpcLocal(true))

// grpcVia is -grpc's transport to the backends where target puts them:
// the Pipeline's strategies through grpcclient's interceptor, the others
// one RPC per attempt.
func grpcVia(target func(b *backend) grpcTarget) transport {
	return transport{attempts: grpcTransport("", target), pipelines: grpcPipelineVia(target)}
}

// grpcPlain is -grpc's transport of attempts: each backend behind a gRPC
// server over TCP on 127.0.0.1, called through a channel without grpc-go's
// retry, one RPC per attempt of the strategy's own, whose number a
// storm-attempt header carries.
func grpcPlain(b *backend) (func(ctx context.Context, c *call, n uint64) error, func()) {
	return grpcTransport("", grpcLocal(true))(b)
}

// grpcPipeline is -grpc's transport of the Pipeline's strategies, each
// backend behind a gRPC server over TCP on 127.0.0.1 (grpcPipelineVia).
func grpcPipeline(b *backend, p *pipeline.Pipeline) (caller, func()) {
	return grpcPipelineVia(grpcLocal(true))(b, p)
}

// grpcPipelineVia is -grpc's transport of the Pipeline's strategies: each
// call goes through grpcclient's unary interceptor running p, installed
// as a user installs it (Interceptor.DialOptions, which turns grpc-go's
// retry off) on a ClientConn to the backend where target puts it. A call
// is one Invoke; its attempts, retries and hedges are the interceptor's
// RPCs, which the server numbers from the grpc-previous-rpc-attempts
// header the interceptor sends. The storm's method is not idempotent by a
// descriptor (it has none), so it is named by RetryMethods.
func grpcPipelineVia(target func(b *backend) grpcTarget) func(b *backend, p *pipeline.Pipeline) (caller, func()) {
	return func(b *backend, p *pipeline.Pipeline) (caller, func()) {
		t := target(b)
		ic := grpcclient.New(grpcclient.WithPipeline(p), grpcclient.RetryMethods(grpcMethod))
		cc := t.dial("", ic.DialOptions()...)
		do := func(ctx context.Context, c *call) error {
			return cc.Invoke(t.withCall(ctx, c), grpcMethod, &emptypb.Empty{}, &emptypb.Empty{})
		}
		return do, func() {
			cc.Close()
			t.stop()
		}
	}
}

// grpcMethod is the backends' one method.
const grpcMethod = "/storm.Backend/Call"

// withCall adds to ctx the headers that name c's draws, and t's backend.
func (t grpcTarget) withCall(ctx context.Context, c *call) context.Context {
	return metadata.AppendToOutgoingContext(ctx, append([]string{headerCall, strconv.FormatUint(c.id, 10), headerSeed, strconv.FormatUint(c.seed, 10)}, t.md...)...)
}

// serveGRPC puts b behind a gRPC server listening on lis, in memory
// (bufconn) or over TCP on 127.0.0.1, and returns how to stop it.
func serveGRPC(b *backend, overTCP bool) (lis net.Listener, stop func()) {
	lis = bufconn.Listen(1 << 20)
	if overTCP {
		var err error
		if lis, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			panic(err)
		}
	}
	srv := grpcServer(func(metadata.MD) (*backend, error) { return b, nil })
	go func() { _ = srv.Serve(lis) }()
	return lis, srv.Stop
}

// grpcServer is a gRPC server of the backend that backendOf finds from
// an RPC's metadata. The server decides each RPC's fate with the draws its
// headers name; the attempt's number is the storm-attempt header, or else
// one more than grpc-previous-rpc-attempts. It answers an empty message,
// which any codec decodes.
func grpcServer(backendOf func(md metadata.MD) (*backend, error)) *grpc.Server {
	return grpc.NewServer(grpc.ForceServerCodec(rawCodec{}), grpc.UnknownServiceHandler(func(_ any, stream grpc.ServerStream) error {
		var in []byte
		if err := stream.RecvMsg(&in); err != nil {
			return err
		}
		md, _ := metadata.FromIncomingContext(stream.Context())
		b, err := backendOf(md)
		if err != nil {
			return status.Error(codes.InvalidArgument, err.Error())
		}
		id, _ := strconv.ParseUint(first(md, headerCall), 10, 64)
		seed, _ := strconv.ParseUint(first(md, headerSeed), 10, 64)
		prev, _ := strconv.ParseUint(first(md, "grpc-previous-rpc-attempts"), 10, 64)
		n := prev + 1
		if a := md.Get(headerAttempt); len(a) > 0 {
			n, _ = strconv.ParseUint(a[0], 10, 64)
		}
		c := &call{id: id, seed: seed}
		if err := b.serve(stream.Context(), c.rand(streamBackend, n)); err != nil {
			return status.Error(codes.Unavailable, err.Error())
		}
		out := []byte{}
		return stream.SendMsg(&out)
	}))
}

// grpcTransport calls each backend where target puts it, through a
// channel with serviceConfig ("": none).
func grpcTransport(serviceConfig string, target func(b *backend) grpcTarget) func(b *backend) (func(ctx context.Context, c *call, n uint64) error, func()) {
	return func(b *backend) (func(ctx context.Context, c *call, n uint64) error, func()) {
		t := target(b)
		cc := t.dial(serviceConfig)
		send := func(ctx context.Context, c *call, n uint64) error {
			ctx = t.withCall(ctx, c)
			if serviceConfig == "" { // the strategy's own attempt; grpc-go's retries are numbered by grpc-go
				ctx = metadata.AppendToOutgoingContext(ctx, headerAttempt, strconv.FormatUint(n, 10))
			}
			in, out := []byte("call"), []byte(nil)
			err := cc.Invoke(ctx, grpcMethod, &in, &out, grpc.ForceCodec(rawCodec{}))
			if serviceConfig != "" || err == nil {
				return err
			}
			// The strategy's own attempt fails as it does in process.
			switch {
			case ctx.Err() != nil:
				return ctx.Err()
			case status.Code(err) == codes.Unavailable && status.Convert(err).Message() == errRefused.Error():
				return errRefused
			}
			return errUnavailable
		}
		return send, func() {
			cc.Close()
			t.stop()
		}
	}
}

func first(md metadata.MD, key string) string {
	if v := md.Get(key); len(v) > 0 {
		return v[0]
	}
	return "0"
}
