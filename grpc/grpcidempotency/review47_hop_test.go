package grpcidempotency_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/resiliencekit/resiliencekit/grpc/grpcclient"
	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// A -> B -> C, B and C behind grpcidempotency, B forwarding the caller's
// key to C through grpcclient. C's first run is slower than B's attempt
// timeout: B's retry gets C's "in progress" (ABORTED, pushback 1 s),
// which does not fit in B's budget, so B answers ABORTED. Is that answer
// stored by B's interceptor as final? A retries once C has finished.
func TestReview47InProgressFromBelowIsStoredAsFinal(t *testing.T) {
	for _, bIdem := range []bool{false, true} {
		t.Run(map[bool]string{false: "B without grpcidempotency", true: "B with grpcidempotency"}[bIdem], func(t *testing.T) {
			c, _ := r47Idem(t, func(ctx context.Context, in *wrapperspb.StringValue) (any, error) {
				time.Sleep(400 * time.Millisecond) // commits, slowly
				return wrapperspb.String("order created"), nil
			}, idempotency.NewGuard(nil))
			ic := grpcclient.New(grpcclient.WithPipeline(pipeline.New(
				pipeline.WithTimeBudget(500*time.Millisecond),
				pipeline.WithAttemptTimeout(150*time.Millisecond),
				pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(4), retrypolicy.BaseDelay(time.Millisecond))),
			)))
			toC := r47Dial(t, c.addr, ic.DialOptions()...)
			hB := func(ctx context.Context, in *wrapperspb.StringValue) (any, error) {
				md, _ := metadata.FromIncomingContext(ctx)
				out := new(wrapperspb.StringValue)
				err := toC.Invoke(ctx, r47Do, in, out, grpcclient.IdempotencyKey(md.Get("idempotency-key")[0]))
				if err != nil {
					return nil, err
				}
				return out, nil
			}
			var toB *grpc.ClientConn
			if bIdem {
				_, toB = r47Idem(t, hB, idempotency.NewGuard(nil))
			} else {
				b := r47Start(t, hB)
				toB = r47Dial(t, b.addr)
			}
			first := r47Call(context.Background(), toB, r47Do, "order-1", "x")
			t.Logf("A's first call: %v", first.err)
			time.Sleep(time.Second) // C's run has ended, its answer stored
			retry := r47Call(context.Background(), toB, r47Do, "order-1", "x")
			t.Logf("A's retry: %v %q (C ran %d)", status.Code(retry.err), retry.resp.GetValue(), c.runs.Load())
			if retry.err != nil {
				t.Errorf("A's retry, after C committed, fails: %v", retry.err)
			}
			if status.Code(first.err) == codes.OK {
				t.Skip("the first call succeeded: timing")
			}
		})
	}
}
