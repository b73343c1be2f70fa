package grpcclient_test

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/grpc/grpcclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// The callee's deadline (what grpc-timeout told it) is never later than
// the caller's, whatever the caller's deadline, the budget, the attempt
// timeout; retries included.
func TestReview130CalleeDeadlineNeverAfterCallers(t *testing.T) {
	srv := startR130(t)
	var mu sync.Mutex
	var seen []time.Time
	var noDeadline int
	fails := 0
	srv.unary.Store(r130Unary(func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		mu.Lock()
		defer mu.Unlock()
		d, ok := ctx.Deadline()
		if !ok {
			noDeadline++
		} else {
			seen = append(seen, d)
		}
		if fails > 0 {
			fails--
			return nil, status.Error(codes.Unavailable, "down")
		}
		return wrapperspb.String("ok"), nil
	}))
	type tc struct {
		name     string
		deadline func() (time.Time, bool)
		p        *pipeline.Pipeline
		fails    int
		wantNone bool
	}
	retry := pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond)))
	cases := []tc{
		{"caller 300ms, budget 2s, attempt 1s", func() (time.Time, bool) { return time.Now().Add(300 * time.Millisecond), true },
			pipeline.New(retry, pipeline.WithTimeBudget(2*time.Second), pipeline.WithAttemptTimeout(time.Second)), 2, false},
		{"no caller deadline, budget 500ms", func() (time.Time, bool) { return time.Time{}, false },
			pipeline.New(retry, pipeline.WithTimeBudget(500*time.Millisecond)), 2, false},
		{"no deadline at all", func() (time.Time, bool) { return time.Time{}, false },
			pipeline.New(retry), 0, true},
		{"caller deadline at MaxInt64 ns", func() (time.Time, bool) { return time.Unix(0, math.MaxInt64), true },
			pipeline.New(retry), 2, false},
		{"caller deadline now+MaxInt64", func() (time.Time, bool) { return time.Now().Add(math.MaxInt64), true },
			pipeline.New(retry, pipeline.WithAttemptTimeout(time.Hour)), 1, false},
		{"caller deadline far, budget huge", func() (time.Time, bool) { return time.Now().Add(200 * time.Hour * 24 * 365), true },
			pipeline.New(retry, pipeline.WithTimeBudget(math.MaxInt64)), 1, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			mu.Lock()
			seen, noDeadline, fails = nil, 0, c.fails
			mu.Unlock()
			ic := grpcclient.New(grpcclient.WithPipeline(c.p), grpcclient.RetryMethods(r130Get))
			cc := srv.dial(t, ic.DialOptions()...)
			ctx := context.Background()
			d, has := c.deadline()
			if has {
				var cancel context.CancelFunc
				ctx, cancel = context.WithDeadline(ctx, d)
				defer cancel()
			}
			start := time.Now()
			got, err := r130Call(ctx, cc, "x")
			if err != nil || got != "ok" {
				t.Fatalf("call failed: %q %v", got, err)
			}
			mu.Lock()
			defer mu.Unlock()
			if c.wantNone {
				if noDeadline != 1 || len(seen) != 0 {
					t.Fatalf("callee saw a deadline the caller never had: %v", seen)
				}
				return
			}
			if noDeadline != 0 || len(seen) != c.fails+1 {
				t.Fatalf("callee saw %d deadlines, %d without", len(seen), noDeadline)
			}
			callerDL, ok := ctx.Deadline()
			if !ok { // the pipeline's budget
				callerDL = start.Add(500 * time.Millisecond)
			}
			// grpc-timeout counts from arrival (transit is not taken off, as
			// for deadline.Middleware), and grpc-go rounds a timeout over
			// 27.7 h up to its unit (s, min, h): tolerate both.
			slack := 5 * time.Millisecond
			if time.Until(callerDL) > 27*time.Hour {
				slack = time.Hour
			}
			for i, s := range seen {
				if s.After(callerDL.Add(slack)) {
					t.Errorf("attempt %d: callee's deadline %v is %v after the caller's", i+1, s, s.Sub(callerDL))
				}
			}
		})
	}
}

// A caller whose deadline has passed, or whose context is canceled, before
// or during the call: no attempt reaches the server after that, nothing is
// retried, the breaker counts nothing.
func TestReview130CallersOwnEndNeverCounted(t *testing.T) {
	srv := startR130(t)
	block := make(chan struct{})
	srv.unary.Store(r130Unary(func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		if in.GetValue() == "block" {
			select {
			case <-ctx.Done():
			case <-block:
			}
			return nil, status.Error(codes.Unavailable, "late")
		}
		return wrapperspb.String("ok"), nil
	}))
	defer close(block)
	b := breaker.New("r130", breaker.ConsecutiveFailures(1))
	p := pipeline.New(pipeline.WithBreaker(b), pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(4), retrypolicy.BaseDelay(time.Millisecond))))
	ic := grpcclient.New(grpcclient.WithPipeline(p), grpcclient.RetryMethods(r130Get))
	cc := srv.dial(t, ic.DialOptions()...)

	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	_, err := r130Call(ctx, cc, "x")
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("expired: code %v, %v", status.Code(err), err)
	}
	cctx, ccancel := context.WithCancel(context.Background())
	ccancel()
	_, err = r130Call(cctx, cc, "x")
	if status.Code(err) != codes.Canceled {
		t.Fatalf("canceled: code %v, %v", status.Code(err), err)
	}
	if n := srv.calls.Load(); n != 0 {
		t.Fatalf("server got %d calls of callers who had gone", n)
	}
	// canceled during the attempt
	cctx, ccancel = context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, ccancel)
	_, err = r130Call(cctx, cc, "block")
	if status.Code(err) != codes.Canceled {
		t.Fatalf("canceled mid-call: code %v, %v", status.Code(err), err)
	}
	time.Sleep(20 * time.Millisecond)
	if n := srv.calls.Load(); n != 1 {
		t.Fatalf("server got %d calls, want 1 (not retried)", n)
	}
	// caller's deadline ends mid-call with a short budget: excluded
	dctx, dcancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer dcancel()
	_, err = r130Call(dctx, cc, "block")
	// The handler sees the propagated deadline first and may answer its
	// "late" before the caller's own deadline fires (1 run in 8 under
	// -race): a plain client gets that answer too. Either way, not counted.
	if st := status.Convert(err); st.Code() != codes.DeadlineExceeded && (st.Code() != codes.Unavailable || st.Message() != "late") {
		t.Fatalf("deadline mid-call: code %v, %v", status.Code(err), err)
	}
	if c := b.Counts(); c.TotalFailures != 0 || b.State().String() != "closed" {
		t.Fatalf("breaker counted the caller's own end: %+v, %v", c, b.State())
	}
	if got, err := r130Call(context.Background(), cc, "x"); err != nil || got != "ok" {
		t.Fatalf("healthy call after: %v", err)
	}
}
