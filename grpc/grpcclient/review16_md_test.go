package grpcclient_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/grpc/grpcclient"
	"github.com/resiliencekit/resiliencekit/grpc/grpctest"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
)

func review16Check(t *testing.T, ctx context.Context, extra ...grpc.DialOption) {
	srv := start(t)
	b := breaker.New("dep", breaker.ConsecutiveFailures(2))
	opts := append(grpcclient.New(grpcclient.WithPipeline(fastPipeline(pipeline.WithBreaker(b)))).DialOptions(), extra...)
	cc, err := grpctest.Dial(srv.Addr, opts...)
	require.NoError(t, err)
	defer cc.Close()
	c := grpctest.NewClient(cc)
	var last error
	for range 3 {
		_, last = c.Get(ctx, "x")
		t.Logf("%v: %v", resilience.Classify(last), last)
		require.Error(t, last)
	}
	t.Logf("class %v, breaker %v %+v: %v", resilience.Classify(last), b.State(), b.Counts(), last)
	assert.Equal(t, resilience.ClassRejected, resilience.Classify(last), "the caller's own metadata")
	assert.Equal(t, resilience.StateClosed, b.State(), "the caller's own errors do not open the breaker")
	assert.Zero(t, srv.Count("Get"))
}

// TestReview16UpperCaseMetadataKeyLiteral: an MD literal with an upper-case
// key (metadata.MD is a map: nothing lowercases it) is refused by grpc-go
// ("header key ... contains illegal characters"); FromOutgoingContext
// lowercases keys, so validMetadata finds nothing wrong and the caller's
// own error counts against the dependency.
func TestReview16UpperCaseMetadataKeyLiteral(t *testing.T) {
	ctx := metadata.NewOutgoingContext(t.Context(), metadata.MD{"X-Tenant": {"a"}})
	review16Check(t, ctx)
}

// TestReview16InnerInterceptorAddsBadMetadata: an interceptor of the
// caller's, chained after ours, adds a value that is not printable
// ASCII; our check looks at our context, which does not hold it.
func TestReview16InnerInterceptorAddsBadMetadata(t *testing.T) {
	inner := grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		return invoker(metadata.AppendToOutgoingContext(ctx, "x-user", "Zoë\n"), method, req, reply, cc, opts...)
	})
	review16Check(t, t.Context(), inner)
}
