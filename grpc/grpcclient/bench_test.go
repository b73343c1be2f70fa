package grpcclient_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/grpc/grpcclient"
	"github.com/resiliencekit/resiliencekit/grpc/grpctest"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// BenchmarkUnary is a successful unary call over TCP on 127.0.0.1, bare,
// bare asking for the trailer as the interceptor does, with grpc-go's
// built-in retry policy, and through the Interceptor, so that the figures
// are ratios to the bare call measured in the same run.
func BenchmarkUnary(b *testing.B) {
	srv := start(b)
	retry := pipeline.WithRetry(retrypolicy.New())
	var trailer metadata.MD
	for _, bc := range []struct {
		name string
		opts []grpc.DialOption
		call []grpc.CallOption
	}{
		{name: "bare"},
		// What the interceptor asks of grpc-go on every call, to read a pushback.
		{name: "bare+trailer", call: []grpc.CallOption{grpc.Trailer(&trailer)}},
		{name: "grpc-builtin-retry", opts: []grpc.DialOption{grpc.WithDefaultServiceConfig(builtinRetry)}},
		{name: "interceptor", opts: grpcclient.New().DialOptions()},
		{name: "interceptor+breaker", opts: grpcclient.New(grpcclient.WithPipeline(pipeline.New(retry,
			pipeline.WithBreaker(breaker.New("bench"))))).DialOptions()},
		{name: "interceptor+breaker-per-target", opts: grpcclient.New(grpcclient.WithPipeline(pipeline.New(retry)),
			grpcclient.BreakerPerTarget(func(target string) *breaker.Breaker { return breaker.New(target) })).DialOptions()},
	} {
		b.Run(bc.name, func(b *testing.B) {
			cc, err := grpctest.Dial(srv.Addr, bc.opts...)
			require.NoError(b, err)
			defer cc.Close()
			in, out := wrapperspb.String("a"), new(wrapperspb.StringValue)
			require.NoError(b, cc.Invoke(b.Context(), grpctest.Get, in, out)) // connect
			b.ReportAllocs()
			for b.Loop() {
				if err := cc.Invoke(b.Context(), grpctest.Get, in, out, bc.call...); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
