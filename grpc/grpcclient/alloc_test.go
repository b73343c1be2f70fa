package grpcclient_test

import (
	"context"
	"testing"

	"google.golang.org/grpc"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/grpc/grpcclient"
	"github.com/resiliencekit/resiliencekit/grpc/grpctest"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// TestSuccessfulUnaryCallAllocatesNothingOfItsOwn checks the interceptor's
// own allocations around an invoker that succeeds: none.
func TestSuccessfulUnaryCallAllocatesNothingOfItsOwn(t *testing.T) {
	cc, err := grpctest.Dial("127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ok := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil }
	for name, ic := range map[string]*grpcclient.Interceptor{
		"default": grpcclient.New(),
		"breaker per target": grpcclient.New(grpcclient.WithPipeline(pipeline.New(pipeline.WithRetry(retrypolicy.New()))),
			grpcclient.BreakerPerTarget(func(target string) *breaker.Breaker { return breaker.New(target) })),
	} {
		ctx := context.Background()
		allocs := testing.AllocsPerRun(1000, func() {
			if err := ic.Unary(ctx, grpctest.Get, nil, nil, cc, ok); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Errorf("%s: %v allocations per call", name, allocs)
		}
	}
}
