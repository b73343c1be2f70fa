package grpcclient_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/resiliencekit/resiliencekit/grpc/grpcclient"
	"github.com/resiliencekit/resiliencekit/grpc/grpctest"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// A non-idempotent method without a key is never twinned; an idempotent
// one is, and every attempt's grpc-timeout is within the caller's.
func TestReview42GRPCHedging(t *testing.T) {
	srv, err := grpctest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ic := grpcclient.New(grpcclient.WithPipeline(pipeline.New(pipeline.WithRetry(retrypolicy.New()),
		pipeline.WithHedging(hedge.New(hedge.Delay(5*time.Millisecond), hedge.MaxExtra(3), hedge.MaxShare(1))))))
	cc, err := grpctest.Dial(srv.Addr, ic.DialOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	c := grpctest.NewClient(cc)
	srv.SetFault(grpctest.Create, grpctest.Fault{Code: codes.OK, Delay: 60 * time.Millisecond})
	srv.SetFault(grpctest.Get, grpctest.Fault{Code: codes.OK, Delay: 60 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := c.Create(ctx, "x"); err != nil {
		t.Errorf("Create: %v", err)
	}
	if _, err := c.Get(ctx, "y"); err != nil {
		t.Errorf("Get: %v", err)
	}
	el := time.Since(start)
	time.Sleep(20 * time.Millisecond)
	if n := srv.Count(grpctest.Create); n != 1 {
		t.Errorf("Create without a key sent %d times", n)
	}
	gets := srv.Calls(grpctest.Get)
	t.Logf("Get attempts %d", len(gets))
	if len(gets) < 2 {
		t.Errorf("Get not hedged")
	}
	for _, g := range gets {
		if g.Deadline <= 0 || g.Deadline > 400*time.Millisecond {
			t.Errorf("attempt deadline %v (caller 400 ms, %v elapsed)", g.Deadline, el)
		}
	}
}
