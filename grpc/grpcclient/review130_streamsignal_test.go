package grpcclient_test

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
	"github.com/resiliencekit/resiliencekit/grpc/grpcsignal"
	"github.com/resiliencekit/resiliencekit/pipeline"
)

// C -> A -> B. B's stream sends a message, then fails with "don't retry"
// (pushback -1: B already retried what it depends on). A reads B's stream
// through grpcclient (committed: not retried, rightly) and returns the
// error it got, behind grpcsignal's interceptor. The signal must reach
// C, as it does when A's call to B is unary: B gets one call per call of
// C's, not one per attempt of C's.
func TestReview130NoRetrySignalOfACommittedStreamReachesTheCaller(t *testing.T) {
	for _, aStream := range []bool{false, true} {
		name := "A calls B unary"
		if aStream {
			name = "A reads B's stream"
		}
		t.Run(name, func(t *testing.T) {
			b := startR130(t)
			b.unary.Store(r130Unary(func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
				_ = grpc.SetTrailer(ctx, metadata.Pairs(grpcsignal.PushbackKey, "-1"))
				return nil, status.Error(codes.Unavailable, "below gave up after retrying")
			}))
			b.stream.Store(r130Stream(func(in *wrapperspb.StringValue, ss grpc.ServerStream) error {
				if err := ss.SendMsg(wrapperspb.String("first")); err != nil {
					return err
				}
				time.Sleep(5 * time.Millisecond)
				ss.SetTrailer(metadata.Pairs(grpcsignal.PushbackKey, "-1"))
				return status.Error(codes.Unavailable, "below gave up after retrying")
			}))
			icA := grpcclient.New(grpcclient.WithPipeline(pipeline.New(r130Retry(3))), grpcclient.RetryMethods(r130Get, r130List))
			ccB := b.dial(t, icA.DialOptions()...)
			a := startR130(t, grpc.UnaryInterceptor(grpcsignal.UnaryServerInterceptor))
			a.unary.Store(r130Unary(func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
				var err error
				if aStream {
					_, err = r130ListAll(ctx, ccB, "x")
				} else {
					_, err = r130Call(ctx, ccB, "x")
				}
				if err != nil {
					return nil, err
				}
				return wrapperspb.String("ok"), nil
			}))
			icC := grpcclient.New(grpcclient.WithPipeline(pipeline.New(r130Retry(3))), grpcclient.RetryMethods(r130Get))
			ccA := a.dial(t, icC.DialOptions()...)
			const calls = 4
			for i := 0; i < calls; i++ {
				if _, err := r130Call(context.Background(), ccA, "x"); status.Code(err) != codes.Unavailable {
					t.Fatalf("call %d: %v", i, err)
				}
			}
			got := b.calls.Load() + b.scalls.Load()
			if got != calls {
				t.Errorf("B got %d calls for %d calls of C: its \"don't retry\" was lost at A, and C retried (A got %d)", got, calls, a.calls.Load())
			}
		})
	}
}
