package grpcclient_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/grpc/grpcclient"
	"github.com/resiliencekit/resiliencekit/grpc/grpctest"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// TestReview79AnUndecodableRequestIsNotCounted: a request of another type
// than the method takes, which the server cannot decode (it answers
// INTERNAL "failed to unmarshal"), is the caller's: with a breaker per
// target that opens on one failure, three of them leave it closed, and
// the healthy call after them succeeds, as with a plain client.
func TestReview79AnUndecodableRequestIsNotCounted(t *testing.T) {
	srv := start(t)
	var opened bool
	c, cc := dial(t, srv, grpcclient.BreakerPerTarget(func(target string) *breaker.Breaker {
		return breaker.New(target, breaker.ConsecutiveFailures(1), breaker.WithListener(resilience.ListenerFunc(func(e resilience.Event) {
			if e.Kind == resilience.EventStateChange && e.To == resilience.StateOpen {
				opened = true
			}
		})))
	}))
	ctx := context.Background()
	for range 3 {
		err := cc.Invoke(ctx, grpctest.Get, wrapperspb.Bytes([]byte("\xff")), new(wrapperspb.StringValue))
		require.Equal(t, codes.Internal, status.Code(err), "%v", err)
	}
	assert.False(t, opened)
	_, err := c.Get(ctx, "ok")
	require.NoError(t, err)
}
