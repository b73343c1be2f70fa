package pipeline_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/throttle"
)

// A call waiting in the limit's queue returns as soon as its caller
// cancels, or its budget ends; it leaves the queue; and neither the
// throttle nor the limit learns anything from it.
func TestReview160QueuedCallHonoursContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim := limit.NewAIMD(limit.Initial(1), limit.Max(1), limit.MaxWaiting(10))
		th := throttle.New()
		p := pipeline.New(pipeline.WithLimit(lim), pipeline.WithThrottle(th), pipeline.WithTimeBudget(50*time.Millisecond),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3))))
		hold, _ := lim.Acquire(context.Background())
		for _, cancelAfter := range []time.Duration{10 * time.Millisecond, time.Hour} {
			ctx, cancel := context.WithCancel(context.Background())
			stop := make(chan struct{})
			go func() {
				select {
				case <-time.After(cancelAfter):
					cancel()
				case <-stop:
				}
			}()
			start := time.Now()
			_, err := pipeline.Do(ctx, p, func(ctx context.Context) (int, error) { return 1, nil })
			took := time.Since(start)
			want := min(cancelAfter, 50*time.Millisecond)
			if took != want {
				t.Errorf("cancel after %v: returned after %v, want %v (err %v)", cancelAfter, took, want, err)
			}
			if !errors.Is(err, limit.ErrLimited) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("err %v", err)
			}
			if lim.Waiting() != 0 {
				t.Errorf("%d still waiting", lim.Waiting())
			}
			close(stop)
			cancel()
		}
		lim.Release(hold, nil)
		if lim.Limit() != 1 || lim.InFlight() != 0 {
			t.Errorf("limit %d in flight %d", lim.Limit(), lim.InFlight())
		}
		// The throttle holds nothing of them: 30 accepts, then 10 failures, nothing refused.
		for range 30 {
			tk, _ := th.Admit()
			th.Done(tk, nil)
		}
		for range 10 {
			tk, _ := th.Admit()
			th.Done(tk, errReview160Blip)
		}
		if pr := th.RejectProbability(); pr != 0 {
			t.Errorf("throttle p %v: the queued calls that never went were counted", pr)
		}
	})
}
