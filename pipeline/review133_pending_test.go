package pipeline_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// lateCtx is a caller's context whose deadline has passed by the clock
// before its Err says so: its timer runs late on a busy machine (the
// breaker's doc: "whether or not ctx has heard of it yet").
type lateCtx struct {
	context.Context // its timer: a moment after dl
	dl              time.Time
}

func (c lateCtx) Deadline() (time.Time, bool) { return c.dl, true }

var errIOTimeout = errors.New("read tcp 127.0.0.1:5000: i/o timeout") // a client that set its socket's deadline from ctx's

// pendingThenSlow answers its first attempt "in progress" (class pending:
// the dependency did nothing wrong), and its second no sooner than its
// caller's deadline, which a client that made the deadline its socket's
// reports as an i/o timeout once the deadline passed by the clock, after
// `after`.
func pendingThenSlow(after time.Duration) func(ctx context.Context) (int, error) {
	var n atomic.Int32
	return func(ctx context.Context) (int, error) {
		if n.Add(1) == 1 {
			return 0, resilience.Pending(errors.New("409: in progress"))
		}
		dl, _ := ctx.Deadline()
		time.Sleep(time.Until(dl) + after)
		return 0, errIOTimeout
	}
}

// review132's fix: a call run more than once that its deadline ended is
// counted by the answer before, left out if pending. It must not depend
// on whether the caller's context's timer fired before the operation
// returned.
func TestReview133PendingThenDeadlineByClock(t *testing.T) {
	for _, tc := range []struct {
		name  string
		heard bool          // ctx.Err() set as the attempt returns
		after time.Duration // the attempt returns this long after the deadline
		timer time.Duration // ctx's timer fires this long after the deadline
	}{
		{"ctx heard", true, 5 * time.Millisecond, time.Millisecond},
		{"clock passed, ctx not yet", false, time.Millisecond, 5 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := breaker.New("dep", breaker.ConsecutiveFailures(1))
				p := pipeline.New(pipeline.WithBreaker(b),
					pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(5), retrypolicy.BaseDelay(10*time.Millisecond), retrypolicy.Jitter(retrypolicy.None))))
				dl := time.Now().Add(time.Second)
				inner, cancel := context.WithDeadline(context.Background(), dl.Add(tc.timer))
				defer cancel()
				_, err := pipeline.Do(lateCtx{inner, dl}, p, pendingThenSlow(tc.after))
				var re *retrypolicy.Error
				if !errors.As(err, &re) || re.Attempts != 2 || !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("err = %#v", err)
				}
				if b.State() != resilience.StateClosed {
					t.Errorf("a healthy dependency that answered 'in progress', then not before the caller's deadline (1 s): breaker %v; err %v", b.State(), err)
				}
			})
		})
	}
}

// The same with real timers: the operation's socket deadline is the
// context's deadline, and both fire at once. The breaker must stay closed
// in every run.
func TestReview133PendingThenDeadlineRealClock(t *testing.T) {
	opened := 0
	const runs = 12
	for range runs {
		b := breaker.New("dep", breaker.ConsecutiveFailures(1))
		p := pipeline.New(pipeline.WithBreaker(b),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(5), retrypolicy.BaseDelay(5*time.Millisecond), retrypolicy.Jitter(retrypolicy.None))))
		ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
		_, err := pipeline.Do(ctx, p, pendingThenSlow(0))
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v", err)
		}
		if b.State() != resilience.StateClosed {
			opened++
		}
	}
	if opened > 0 {
		t.Errorf("the breaker opened in %d of %d runs against a healthy dependency that answered 'in progress' and then took its callers' whole budget", opened, runs)
	}
}
