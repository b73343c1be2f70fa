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

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/grpc/grpcclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
)

// A "watch": a server stream that a healthy server keeps open, sending
// events (or nothing, or only its headers) until the caller's deadline
// ends it, as gRPC watch/long-poll clients bound them
// (context.WithTimeout, then reopen). A plain client sees each end as the
// watch's normal end. The watches must not open the target's breaker,
// which the target's unary calls share: a unary call to the healthy
// server after them must succeed. (A watch whose server sent no message,
// headers or not, is as a hung server's and counts, as documented: the
// modes "silent" and "headers only" are left out; review132 showed a
// server hanging after its headers never opened the breaker.)
func TestReview130WatchesEndedByTheirDeadlineDoNotOpenTheBreaker(t *testing.T) {
	for _, mode := range []string{"events"} {
		t.Run(mode, func(t *testing.T) {
			srv := startR130(t)
			srv.stream.Store(r130Stream(func(in *wrapperspb.StringValue, ss grpc.ServerStream) error {
				switch mode {
				case "events":
					for {
						if err := ss.SendMsg(wrapperspb.String("event")); err != nil {
							return err
						}
						select {
						case <-ss.Context().Done():
							return status.FromContextError(ss.Context().Err()).Err()
						case <-time.After(10 * time.Millisecond):
						}
					}
				case "headers only":
					_ = ss.SendHeader(metadata.Pairs("watch", "1"))
				}
				<-ss.Context().Done()
				return status.FromContextError(ss.Context().Err()).Err()
			}))
			var b *breaker.Breaker
			ic := grpcclient.New(
				grpcclient.WithPipeline(pipeline.New(r130Retry(3))),
				grpcclient.RetryMethods(r130Get, r130List),
				grpcclient.BreakerPerTarget(func(target string) *breaker.Breaker {
					b = breaker.New(target, breaker.ConsecutiveFailures(3))
					return b
				}))
			cc := srv.dial(t, ic.DialOptions()...)
			// warm up: a few quick unary answers teach the breaker the latency
			for i := 0; i < 5; i++ {
				if _, err := r130Call(context.Background(), cc, "x"); err != nil {
					t.Fatal(err)
				}
			}
			for i := 0; i < 4; i++ {
				ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
				got, err := r130ListAll(ctx, cc, "watch")
				cancel()
				if status.Code(err) != codes.DeadlineExceeded {
					t.Errorf("watch %d: %v after %d events", i, err, len(got))
				}
			}
			_, err := r130Call(context.Background(), cc, "x")
			if err != nil {
				t.Errorf("a unary call to the healthy server after 4 watches failed: %v (breaker %v, %+v)", err, b.State(), b.Counts())
			}
			if c := b.Counts(); c.TotalFailures > 0 {
				t.Errorf("the watches ended by their deadlines counted as %d failures", c.TotalFailures)
			}
		})
	}
}

// The same watch, bounded by the pipeline's own time budget rather than
// the caller's deadline: the toolkit's own limit ends a healthy stream
// that is sending events; its end must not count against the dependency.
func TestReview130WatchesEndedByTheBudgetDoNotOpenTheBreaker(t *testing.T) {
	srv := startR130(t)
	srv.stream.Store(r130Stream(func(in *wrapperspb.StringValue, ss grpc.ServerStream) error {
		for {
			if err := ss.SendMsg(wrapperspb.String("event")); err != nil {
				return err
			}
			select {
			case <-ss.Context().Done():
				return status.FromContextError(ss.Context().Err()).Err()
			case <-time.After(10 * time.Millisecond):
			}
		}
	}))
	b := breaker.New("r130w", breaker.ConsecutiveFailures(3))
	ic := grpcclient.New(grpcclient.WithPipeline(pipeline.New(r130Retry(3), pipeline.WithBreaker(b), pipeline.WithTimeBudget(150*time.Millisecond))),
		grpcclient.RetryMethods(r130Get, r130List))
	cc := srv.dial(t, ic.DialOptions()...)
	for i := 0; i < 4; i++ {
		got, err := r130ListAll(context.Background(), cc, "watch")
		if status.Code(err) != codes.DeadlineExceeded {
			t.Errorf("watch %d: %v after %d events", i, err, len(got))
		}
	}
	if _, err := r130Call(context.Background(), cc, "x"); err != nil {
		t.Errorf("a unary call to the healthy server after 4 watches failed: %v (%+v)", err, b.Counts())
	}
}
