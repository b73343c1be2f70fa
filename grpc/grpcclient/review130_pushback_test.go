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
	"github.com/resiliencekit/resiliencekit/grpc/grpcsignal"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// The pushback trailer, as docs/grpc.md's table says: negative,
// malformed or repeated on a transient or terminal code is terminal (no
// retry, counted); 0 or more on ABORTED is retried but not counted
// (pending, as the package doc says since e04b8ca); a positive one is
// waited up to MaxDelay.
func TestReview130PushbackAsDocumented(t *testing.T) {
	type tc struct {
		code     codes.Code
		values   []string
		header   bool // set with SetHeader instead of SetTrailer
		attempts int64
		failures uint32
		minTime  time.Duration
	}
	cases := []tc{
		{codes.Unavailable, []string{"-1"}, false, 1, 1, 0},
		{codes.Unavailable, []string{"abc"}, false, 1, 1, 0},
		{codes.Unavailable, []string{""}, false, 1, 1, 0},
		{codes.Unavailable, []string{"2147483648"}, false, 1, 1, 0},
		{codes.Unavailable, []string{"99999999999999999999999"}, false, 1, 1, 0},
		{codes.Unavailable, []string{"1.5"}, false, 1, 1, 0},
		{codes.Unavailable, []string{"5", "5"}, false, 1, 1, 0},
		{codes.Unavailable, []string{"0"}, false, 3, 1, 0},
		{codes.Unavailable, []string{"2147483647"}, false, 3, 1, 60 * time.Millisecond},
		{codes.Unavailable, []string{"40"}, false, 3, 1, 60 * time.Millisecond},
		{codes.Internal, []string{"10"}, false, 1, 1, 0},
		{codes.Aborted, []string{"0"}, false, 3, 0, 0}, // "try again later": resilience.ClassPending, not counted (e04b8ca)
		{codes.Aborted, []string{"-1"}, false, 1, 0, 0},
		{codes.NotFound, []string{"-1"}, false, 1, 0, 0},
		{codes.DeadlineExceeded, []string{"-5"}, false, 1, 1, 0},
	}
	for _, c := range cases {
		name := c.code.String()
		for _, v := range c.values {
			name += "/" + v
		}
		t.Run(name, func(t *testing.T) {
			srv := startR130(t)
			srv.unary.Store(r130Unary(func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
				md := metadata.MD{}
				for _, v := range c.values {
					md.Append(grpcsignal.PushbackKey, v)
				}
				_ = grpc.SetTrailer(ctx, md)
				return nil, status.Error(c.code, "no")
			}))
			b := breaker.New("r130p", breaker.ConsecutiveFailures(100))
			p := pipeline.New(pipeline.WithBreaker(b), pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond), retrypolicy.MaxDelay(30*time.Millisecond))))
			ic := grpcclient.New(grpcclient.WithPipeline(p), grpcclient.RetryMethods(r130Get))
			cc := srv.dial(t, ic.DialOptions()...)
			start := time.Now()
			_, err := r130Call(context.Background(), cc, "x")
			el := time.Since(start)
			if status.Code(err) != c.code {
				t.Errorf("code %v, want %v: %v", status.Code(err), c.code, err)
			}
			if n := srv.calls.Load(); n != c.attempts {
				t.Errorf("%d attempts, want %d", n, c.attempts)
			}
			if f := b.Counts().TotalFailures; f != c.failures {
				t.Errorf("%d breaker failures, want %d", f, c.failures)
			}
			if el < c.minTime || el > 2*time.Second {
				t.Errorf("took %v, want at least %v", el, c.minTime)
			}
		})
	}
}
