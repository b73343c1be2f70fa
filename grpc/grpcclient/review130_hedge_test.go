package grpcclient_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/grpc/grpcclient"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/pipeline"
)

// Hedged unary calls, some canceled by their caller at random, some
// failing: each call's reply and header are its winner's own (never
// another call's), OnFinish runs once, canceled calls are not counted by
// the breaker, and nothing is left running.
func TestReview130HedgedUnaryStress(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	srv := startR130(t)
	srv.unary.Store(r130Unary(func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		_ = grpc.SetHeader(ctx, metadata.Pairs("echo", in.GetValue()))
		d := time.Duration(rand.IntN(8)) * time.Millisecond
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(d):
		}
		if rand.IntN(4) == 0 {
			return nil, status.Error(codes.Unavailable, "flaky")
		}
		return wrapperspb.String("ok:" + in.GetValue()), nil
	}))
	b := breaker.New("r130h", breaker.ConsecutiveFailures(1000))
	p := pipeline.New(r130Retry(4), pipeline.WithBreaker(b), pipeline.WithHedging(hedge.New(hedge.Delay(2*time.Millisecond), hedge.MaxExtra(2), hedge.MaxShare(1))))
	ic := grpcclient.New(grpcclient.WithPipeline(p), grpcclient.RetryMethods(r130Get))
	cc, err := grpc.NewClient(srv.addr, append(ic.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []string
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 60; i++ {
				in := string(rune('a'+g)) + string(rune('0'+i%10))
				ctx, cancel := context.WithCancel(context.Background())
				if i%5 == 0 {
					time.AfterFunc(time.Duration(rand.IntN(4))*time.Millisecond, cancel)
				}
				var hdr metadata.MD
				finished := 0
				out := new(wrapperspb.StringValue)
				err := cc.Invoke(ctx, r130Get, wrapperspb.String(in), out, grpc.Header(&hdr), grpc.OnFinish(func(error) { finished++ }))
				cancel()
				mu.Lock()
				switch {
				case finished != 1:
					errs = append(errs, "OnFinish ran "+string(rune('0'+finished))+" times")
				case err == nil && out.GetValue() != "ok:"+in:
					errs = append(errs, "reply "+out.GetValue()+" for "+in)
				case err == nil && (len(hdr["echo"]) != 1 || hdr["echo"][0] != in):
					errs = append(errs, "header of another call for "+in)
				}
				mu.Unlock()
			}
		}(g)
	}
	wg.Wait()
	for i, e := range errs {
		if i < 10 {
			t.Error(e)
		}
	}
	cc.Close()
	srv.srv.Stop()
	time.Sleep(50 * time.Millisecond)
}
