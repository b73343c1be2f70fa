package grpcsignal_test

import (
	"context"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/grpc/grpcclient"
	"github.com/resiliencekit/resiliencekit/grpc/grpcsignal"
	"github.com/resiliencekit/resiliencekit/grpc/grpctest"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
)

func TestReview82_GRPCHedgedNotRetriedAbove(t *testing.T) {
	for _, tc := range []struct {
		name  string
		delay time.Duration
		after time.Duration
		want  int
	}{
		{"hedged", 40 * time.Millisecond, 10 * time.Millisecond, 2},
		// The hedge is due long after the backend's answer: under load, the
		// first call's connection can take longer than 10 ms.
		{"unhedged", 0, time.Minute, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			back, err := grpctest.Start()
			if err != nil {
				t.Fatal(err)
			}
			defer back.Close()
			back.SetFault(grpctest.Get, grpctest.Fault{Code: codes.Unavailable, Delay: tc.delay})
			mi := grpcclient.New(grpcclient.WithPipeline(pipeline.New(
				pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(1))),
				pipeline.WithHedging(hedge.New(hedge.Delay(tc.after), hedge.MaxShare(1))))))
			bcc, err := grpctest.Dial(back.Addr, mi.DialOptions()...)
			if err != nil {
				t.Fatal(err)
			}
			defer bcc.Close()
			bc := grpctest.NewClient(bcc)
			var lastErr error
			forward := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
				if info.FullMethod != grpctest.Get {
					return h(ctx, req)
				}
				_, err := bc.Get(ctx, "x")
				lastErr = err
				if err != nil {
					return nil, err
				}
				return h(ctx, req)
			}
			mid, err := grpctest.Start(grpc.ChainUnaryInterceptor(grpcsignal.UnaryServerInterceptor, forward))
			if err != nil {
				t.Fatal(err)
			}
			defer mid.Close()
			fi := grpcclient.New(grpcclient.WithPipeline(pipeline.New(
				pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond))))))
			fcc, err := grpctest.Dial(mid.Addr, fi.DialOptions()...)
			if err != nil {
				t.Fatal(err)
			}
			defer fcc.Close()
			_, err = grpctest.NewClient(fcc).Get(context.Background(), "x")
			if got := back.Count(grpctest.Get); got != tc.want {
				t.Errorf("backend saw %d, want %d; front err %v; mid err %v hedged=%v", got, tc.want, err, lastErr, pipeline.Hedged(lastErr))
			}
		})
	}
}
