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
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// C -> A -> B, each client retrying up to 3 attempts, A behind grpcsignal's
// interceptors: B never gets more than the 3 attempts of one layer per
// call C makes.
func TestReview130OneLayerAcrossTwoGRPCHops(t *testing.T) {
	retry3 := func() pipeline.Option {
		return pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(2*time.Millisecond), retrypolicy.MaxDelay(20*time.Millisecond)))
	}
	type tc struct {
		name    string
		b       r130Unary
		bStream r130Stream
		aPipe   *pipeline.Pipeline
		cPipe   *pipeline.Pipeline
		aStream bool // A calls B's stream
		cStream bool // C calls A's stream
		max     int64
	}
	unavailable := r130Unary(func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		return nil, status.Error(codes.Unavailable, "b down")
	})
	cases := []tc{
		{name: "B unavailable", b: unavailable, max: 3},
		{name: "B resource exhausted with pushback 1ms", b: func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
			_ = grpc.SetTrailer(ctx, metadata.Pairs(grpcsignal.PushbackKey, "1"))
			return nil, status.Error(codes.ResourceExhausted, "b busy")
		}, max: 3},
		{name: "B deadline exceeded at once", b: func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
			return nil, status.Error(codes.DeadlineExceeded, "b's own timeout")
		}, max: 3},
		{name: "B hangs past A's attempt timeout", b: func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
			<-ctx.Done()
			return nil, status.Error(codes.Unavailable, "gone")
		}, aPipe: pipeline.New(retry3(), pipeline.WithAttemptTimeout(30*time.Millisecond)),
			cPipe: pipeline.New(retry3(), pipeline.WithAttemptTimeout(2*time.Second)), max: 3},
		{name: "B's stream fails before headers", bStream: func(in *wrapperspb.StringValue, ss grpc.ServerStream) error {
			return status.Error(codes.Unavailable, "b stream down")
		}, aStream: true, max: 3},
		{name: "A hedges", b: func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
			time.Sleep(20 * time.Millisecond)
			return nil, status.Error(codes.Unavailable, "b down")
		}, aPipe: pipeline.New(retry3(), pipeline.WithHedging(hedge.New(hedge.Delay(5*time.Millisecond), hedge.MaxExtra(1), hedge.MaxShare(1)))), max: 5},
		{name: "C calls A's stream", b: unavailable, cStream: true, max: 3},
		{name: "B answers UNAVAILABLE with -1", b: func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
			_ = grpc.SetTrailer(ctx, metadata.Pairs(grpcsignal.PushbackKey, "-1"))
			return nil, status.Error(codes.Unavailable, "b's own below gave up")
		}, max: 1},
		{name: "A's own budget runs out after 2 attempts", b: func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
			time.Sleep(30 * time.Millisecond)
			return nil, status.Error(codes.Unavailable, "b slow and down")
		}, aPipe: pipeline.New(retry3(), pipeline.WithTimeBudget(70*time.Millisecond)),
			cPipe: pipeline.New(retry3(), pipeline.WithTimeBudget(5*time.Second)), max: 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := startR130(t)
			if c.b != nil {
				b.unary.Store(c.b)
			}
			if c.bStream != nil {
				b.stream.Store(c.bStream)
			}
			aPipe := c.aPipe
			if aPipe == nil {
				aPipe = pipeline.New(retry3())
			}
			cPipe := c.cPipe
			if cPipe == nil {
				cPipe = pipeline.New(retry3())
			}
			icA := grpcclient.New(grpcclient.WithPipeline(aPipe), grpcclient.RetryMethods(r130Get, r130List))
			ccB := b.dial(t, icA.DialOptions()...)
			a := startR130(t, grpc.UnaryInterceptor(grpcsignal.UnaryServerInterceptor), grpc.StreamInterceptor(grpcsignal.StreamServerInterceptor))
			forward := func(ctx context.Context) error {
				if c.aStream {
					_, err := r130ListAll(ctx, ccB, "x")
					return err
				}
				_, err := r130Call(ctx, ccB, "x")
				return err
			}
			a.unary.Store(r130Unary(func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
				if err := forward(ctx); err != nil {
					return nil, err
				}
				return wrapperspb.String("ok"), nil
			}))
			a.stream.Store(r130Stream(func(in *wrapperspb.StringValue, ss grpc.ServerStream) error {
				if err := forward(ss.Context()); err != nil {
					return err
				}
				return ss.SendMsg(wrapperspb.String("ok"))
			}))
			icC := grpcclient.New(grpcclient.WithPipeline(cPipe), grpcclient.RetryMethods(r130Get, r130List))
			ccA := a.dial(t, icC.DialOptions()...)
			const calls = 5
			for i := 0; i < calls; i++ {
				var err error
				if c.cStream {
					_, err = r130ListAll(context.Background(), ccA, "x")
				} else {
					_, err = r130Call(context.Background(), ccA, "x")
				}
				if err == nil {
					t.Fatal("call succeeded against a dead B")
				}
			}
			got := b.calls.Load() + b.scalls.Load()
			if got > c.max*calls {
				t.Errorf("B got %d attempts for %d calls of C (%.1f each), at most %d each for one layer of retries; A got %d",
					got, calls, float64(got)/calls, c.max, a.calls.Load()+a.scalls.Load())
			}
			t.Logf("B got %d, A got %d for %d calls", got, a.calls.Load()+a.scalls.Load(), calls)
		})
	}
}
