package grpcsignal_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/resiliencekit/resiliencekit/grpc/grpcsignal"
	"github.com/resiliencekit/resiliencekit/grpc/grpctest"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/pipeline"
)

// A -> B -> C, B forwarding its whole incoming metadata to C (a common
// gateway pattern). A's retry says grpc-previous-rpc-attempts: 1; C must
// see this hop's count, not A's: none on B's first attempt, 1 on B's
// retry; with and without hedging at B.
func TestReview21ForwardedPreviousAttemptsAreReplaced(t *testing.T) {
	for _, hedged := range []bool{false, true} {
		name := "plain"
		if hedged {
			name = "hedged"
		}
		t.Run(name, func(t *testing.T) {
			c, err := grpctest.Start()
			require.NoError(t, err)
			defer c.Close()
			opts := []pipeline.Option{review21Retry()}
			if hedged {
				opts = append(opts, pipeline.WithHedging(hedge.New(hedge.Delay(50*time.Millisecond))))
			}
			toC := review21GRPCConn(t, c.Addr, pipeline.New(opts...))
			var bCalls atomic.Int64
			var bSaw []int
			bAddr := review21GRPCHop(t, func(ctx context.Context, in string) (string, error) {
				bSaw = append(bSaw, grpcsignal.PreviousAttempts(ctx))
				if bCalls.Add(1) == 1 {
					return "", status.Error(codes.Unavailable, "b blip") // B's own: A retries
				}
				md, _ := metadata.FromIncomingContext(ctx)
				return toC.Get(metadata.NewOutgoingContext(ctx, md.Copy()), in)
			})
			c.SetFault(grpctest.Get, grpctest.Fault{Code: codes.Unavailable, Calls: 1})
			a := review21GRPCConn(t, bAddr, pipeline.New(review21Retry()))
			out, err := a.Get(context.Background(), "x")
			require.NoError(t, err)
			assert.Equal(t, "get:x", out)
			assert.Equal(t, []int{0, 1}, bSaw)
			calls := c.Calls(grpctest.Get)
			require.Len(t, calls, 2)
			assert.Empty(t, calls[0].Metadata.Get(grpcsignal.PreviousAttemptsKey), "B's first attempt")
			assert.Equal(t, []string{"1"}, calls[1].Metadata.Get(grpcsignal.PreviousAttemptsKey), "B's retry")
		})
	}
}
