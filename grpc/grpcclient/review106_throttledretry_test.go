package grpcclient_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/resiliencekit/resiliencekit/grpc/grpcclient"
	"github.com/resiliencekit/resiliencekit/grpc/grpcsignal"
	"github.com/resiliencekit/resiliencekit/grpc/grpctest"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrysignal"
	"github.com/resiliencekit/resiliencekit/throttle"
)

// overload drives th into refusing nearly everything: many failures,
// no accept, in the current bucket.
func review106Overload(th *throttle.Throttle) {
	fail := errors.New("unavailable")
	for range 5000 {
		if tk, err := th.Admit(); err == nil {
			th.Done(tk, fail)
		}
	}
}

// A gRPC dependency answers UNAVAILABLE; the call's retry is refused by the
// shared throttle. Before the session such a call ended UNAVAILABLE (the
// pipeline's own refusal, class rejected); now its class is the sent
// attempt's (transient), and grpcclient's callError maps it to UNKNOWN: a
// code that plain gRPC clients and service configs do not retry, and an
// HTTP 500 through retrysignal.Status.
func TestReview106ThrottledRetryOfGRPCCallIsUnavailable(t *testing.T) {
	srv := start(t)
	srv.SetFault(grpctest.Get, grpctest.Fault{Code: codes.Unavailable})
	th := throttle.New(throttle.Window(100 * time.Second))
	p := pipeline.New(
		pipeline.WithRetry(fastRetry(3)),
		pipeline.WithThrottle(th),
		pipeline.WithListener(resilience.ListenerFunc(func(ev resilience.Event) {
			if ev.Kind == resilience.EventAttempt && ev.Attempt == 1 && ev.Err != nil {
				review106Overload(th)
			}
		})),
	)
	c, _ := dial(t, srv, grpcclient.WithPipeline(p))
	refusedRetries := 0
	for range 20 {
		srv.Reset()
		srv.SetFault(grpctest.Get, grpctest.Fault{Code: codes.Unavailable})
		_, err := c.Get(context.Background(), "x")
		if err == nil || !errors.Is(err, throttle.ErrThrottled) || srv.Count(grpctest.Get) != 1 {
			continue // not the scenario (first attempt refused, or retry let through)
		}
		refusedRetries++
		st, _ := status.FromError(err)
		if st.Code() != codes.Unavailable {
			t.Errorf("dependency UNAVAILABLE, retry throttled: call's code %v, want UNAVAILABLE (was before the session); class %v", st.Code(), resilience.Classify(err))
		}
		if s := retrysignal.Status(err); s != http.StatusServiceUnavailable {
			t.Errorf("retrysignal.Status = %d, want 503", s)
		}
		if c := grpcsignal.Code(err); c != codes.Unavailable {
			t.Errorf("grpcsignal.Code = %v, want UNAVAILABLE", c)
		}
		break
	}
	if refusedRetries == 0 {
		t.Skip("scenario not reached")
	}
}
