package grpcclient_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/resiliencekit/resiliencekit/grpc/grpcclient"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
)

// grpc-go's rules let a caller end a stream by closing its ClientConn
// instead of canceling or reading to the end: nothing of the
// interceptor's may stay behind, and a limit of 1 shared with another
// connection admits the next stream.
func TestReview130StreamsEndedByClosingTheConn(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	srv := startR130(t)
	srv.stream.Store(r130Stream(func(in *wrapperspb.StringValue, ss grpc.ServerStream) error {
		if in.GetValue() == "silent" {
			<-ss.Context().Done()
			return nil
		}
		for {
			if err := ss.SendMsg(wrapperspb.String("m")); err != nil {
				return err
			}
			time.Sleep(time.Millisecond)
		}
	}))
	lim := limit.NewFixed(1, limit.MaxWaiting(0))
	p := pipeline.New(r130Retry(3), pipeline.WithLimit(lim), pipeline.WithTimeBudget(time.Hour))
	ic := grpcclient.New(grpcclient.WithPipeline(p), grpcclient.RetryMethods(r130List))
	dial := func() *grpc.ClientConn {
		cc, err := grpc.NewClient(srv.addr, append(ic.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
		if err != nil {
			t.Fatal(err)
		}
		return cc
	}
	for _, in := range []string{"many", "silent"} {
		cc := dial()
		st, err := cc.NewStream(context.Background(), r130ListDesc, r130List)
		if err != nil {
			t.Fatal(err)
		}
		_ = st.SendMsg(wrapperspb.String(in))
		_ = st.CloseSend()
		if in == "many" {
			if err := st.RecvMsg(new(wrapperspb.StringValue)); err != nil {
				t.Fatal(err)
			}
		} else {
			time.Sleep(20 * time.Millisecond)
		}
		cc.Close()
		cc2 := dial()
		ok := false
		for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			st2, err := cc2.NewStream(ctx, r130ListDesc, r130List)
			if err == nil {
				_ = st2.SendMsg(wrapperspb.String("silent"))
				cancel()
				_ = st2.RecvMsg(new(wrapperspb.StringValue))
				ok = true
				break
			}
			cancel()
		}
		cc2.Close()
		if !ok {
			t.Fatalf("%s: a stream ended by closing its conn still holds the limit", in)
		}
	}
	srv.srv.Stop()
	time.Sleep(50 * time.Millisecond)
}
