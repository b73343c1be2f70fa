package grpcclient_test

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/grpc/grpcclient"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

func r130Retry(n int) pipeline.Option {
	return pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(n), retrypolicy.BaseDelay(2*time.Millisecond), retrypolicy.MaxDelay(20*time.Millisecond)))
}

// A stream that fails after 2 messages: the caller gets both and the
// server's status; not retried; one breaker failure, no success.
func TestReview130StreamFailsAfterSomeMessages(t *testing.T) {
	srv := startR130(t)
	srv.stream.Store(r130Stream(func(in *wrapperspb.StringValue, ss grpc.ServerStream) error {
		for i := 0; i < 2; i++ {
			if err := ss.SendMsg(wrapperspb.String("m")); err != nil {
				return err
			}
		}
		return status.Error(codes.Unavailable, "broke mid-stream")
	}))
	b := breaker.New("r130s", breaker.ConsecutiveFailures(100))
	ic := grpcclient.New(grpcclient.WithPipeline(pipeline.New(pipeline.WithBreaker(b), r130Retry(3))), grpcclient.RetryMethods(r130List))
	cc := srv.dial(t, ic.DialOptions()...)
	got, err := r130ListAll(context.Background(), cc, "x")
	if len(got) != 2 || status.Code(err) != codes.Unavailable {
		t.Fatalf("got %v, %v", got, err)
	}
	time.Sleep(20 * time.Millisecond)
	if n := srv.scalls.Load(); n != 1 {
		t.Fatalf("server got %d streams, want 1 (committed: never retried)", n)
	}
	if c := b.Counts(); c.TotalFailures != 1 || c.TotalSuccesses != 0 {
		t.Fatalf("breaker counts %+v, want 1 failure", c)
	}
}

// A caller that abandons its stream (cancels the context) at any point:
// nothing of the interceptor's is left running, and a concurrency limit
// of 1 admits the next stream at once.
func TestReview130AbandonedStreamsLeakNothing(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	srv := startR130(t)
	srv.stream.Store(r130Stream(func(in *wrapperspb.StringValue, ss grpc.ServerStream) error {
		switch in.GetValue() {
		case "fail":
			return status.Error(codes.Unavailable, "down")
		case "silent":
			<-ss.Context().Done()
			return ss.Context().Err()
		}
		for i := 0; ; i++ {
			if err := ss.SendMsg(wrapperspb.String("m")); err != nil {
				return err
			}
			time.Sleep(time.Millisecond)
		}
	}))
	lim := limit.NewFixed(1, limit.MaxWaiting(0))
	p := pipeline.New(pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(5), retrypolicy.BaseDelay(200*time.Millisecond), retrypolicy.MaxDelay(time.Second))), pipeline.WithLimit(lim))
	ic := grpcclient.New(grpcclient.WithPipeline(p), grpcclient.RetryMethods(r130List))
	func() {
		cc, err := grpc.NewClient(srv.addr, append(ic.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		scenarios := []struct {
			name string
			in   string
			use  func(st grpc.ClientStream) error
		}{
			{"after one message", "many", func(st grpc.ClientStream) error {
				_ = st.SendMsg(wrapperspb.String("many"))
				_ = st.CloseSend()
				return st.RecvMsg(new(wrapperspb.StringValue))
			}},
			{"without anything", "", func(st grpc.ClientStream) error { return nil }},
			{"after send, no CloseSend", "silent", func(st grpc.ClientStream) error { return st.SendMsg(wrapperspb.String("silent")) }},
			{"during a retry's backoff", "fail", func(st grpc.ClientStream) error {
				_ = st.SendMsg(wrapperspb.String("fail"))
				_ = st.CloseSend()
				time.Sleep(50 * time.Millisecond) // first attempt failed, backoff of up to 200ms
				return nil
			}},
			{"header only waited", "silent", func(st grpc.ClientStream) error {
				_ = st.SendMsg(wrapperspb.String("silent"))
				go func() { _, _ = st.Header() }()
				time.Sleep(10 * time.Millisecond)
				return nil
			}},
		}
		for _, sc := range scenarios {
			ctx, cancel := context.WithCancel(context.Background())
			st, err := cc.NewStream(ctx, r130ListDesc, r130List)
			if err != nil {
				t.Fatalf("%s: %v", sc.name, err)
			}
			if err := sc.use(st); err != nil && !errors.Is(err, io.EOF) {
				t.Fatalf("%s: %v", sc.name, err)
			}
			cancel()
			// the next stream is admitted by the limit of 1
			deadline := time.Now().Add(2 * time.Second)
			for {
				ctx2, cancel2 := context.WithTimeout(context.Background(), time.Second)
				st2, err := cc.NewStream(ctx2, r130ListDesc, r130List)
				if err == nil {
					_ = st2.SendMsg(wrapperspb.String("silent"))
					cancel2()
					// drain it so its end is seen
					_ = st2.RecvMsg(new(wrapperspb.StringValue))
					break
				}
				cancel2()
				if time.Now().After(deadline) {
					t.Fatalf("%s: the abandoned stream still holds the limit: %v", sc.name, err)
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
	}()
	srv.srv.Stop()
	time.Sleep(50 * time.Millisecond)
}

// A pipeline that hedges never runs a stream's attempts side by side: the
// server never sees two of one call at once, nor more than the attempts.
func TestReview130HedgingPipelineNeverHedgesStreams(t *testing.T) {
	srv := startR130(t)
	srv.stream.Store(r130Stream(func(in *wrapperspb.StringValue, ss grpc.ServerStream) error {
		time.Sleep(30 * time.Millisecond)
		return status.Error(codes.Unavailable, "slow and down")
	}))
	p := pipeline.New(r130Retry(3), pipeline.WithHedging(hedge.New(hedge.Delay(time.Millisecond), hedge.MaxExtra(3), hedge.MaxShare(1))))
	ic := grpcclient.New(grpcclient.WithPipeline(p), grpcclient.RetryMethods(r130List))
	cc := srv.dial(t, ic.DialOptions()...)
	_, err := r130ListAll(context.Background(), cc, "x")
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("err %v", err)
	}
	if n := srv.scalls.Load(); n != 3 {
		t.Errorf("server got %d streams, want 3", n)
	}
	if srv.peak != 1 {
		t.Errorf("server saw %d attempts of one stream at once", srv.peak)
	}
}
