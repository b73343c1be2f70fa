package pipeline_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// A healthy dependency answers a keyed repeat "409 in progress" (class
// pending, with a Retry-After); the call waits to retry; its caller
// upstream hangs up a moment before its deadline, as a hop told its budget
// does (package deadline). A pending answer must never count as a failure.
func TestReview132PendingHopHangupNotFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("healthy", breaker.ConsecutiveFailures(3), breaker.OpenTimeout(time.Hour))
		p := pipeline.New(pipeline.WithBreaker(b),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(0), retrypolicy.BaseDelay(10*time.Millisecond), retrypolicy.MaxDelay(10*time.Millisecond))))
		op := func(ctx context.Context) (int, error) {
			select { // the dependency takes 50 ms to answer
			case <-time.After(50 * time.Millisecond):
			case <-ctx.Done():
				return 0, ctx.Err()
			}
			return 0, resilience.RetryAfter(resilience.Pending(errors.New("409 in progress")), 10*time.Millisecond)
		}
		for range 5 {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			t2 := time.AfterFunc(time.Second-5*time.Millisecond, cancel) // the hop's caller hangs up first
			_, err := pipeline.Do(ctx, p, op)
			t.Logf("err %v ctx %v", err, ctx.Err())
			t2.Stop()
			cancel()
		}
		if c := b.Counts(); c.TotalFailures != 0 || b.State() != resilience.StateClosed {
			t.Fatalf("breaker %v, counts %+v: pending answers counted as failures", b.State(), c)
		}
	})
}

var errIgnored132 = errors.New("429 shed")

// The same for an answer IgnoreIf leaves out: a hop hang-up after it
// counts the call a failure.
func TestReview132IgnoredHopHangupNotFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("healthy", breaker.ConsecutiveFailures(3), breaker.OpenTimeout(time.Hour),
			breaker.IgnoreIf(func(err error) bool { return errors.Is(err, errIgnored132) }))
		p := pipeline.New(pipeline.WithBreaker(b),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(0), retrypolicy.BaseDelay(10*time.Millisecond), retrypolicy.MaxDelay(10*time.Millisecond))))
		op := func(ctx context.Context) (int, error) {
			select {
			case <-time.After(50 * time.Millisecond):
			case <-ctx.Done():
				return 0, ctx.Err()
			}
			return 0, errIgnored132
		}
		for range 5 {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			t2 := time.AfterFunc(time.Second-5*time.Millisecond, cancel)
			pipeline.Do(ctx, p, op)
			t2.Stop()
			cancel()
		}
		if c := b.Counts(); c.TotalFailures != 0 || b.State() != resilience.StateClosed {
			t.Fatalf("breaker %v, counts %+v: answers IgnoreIf leaves out counted as failures", b.State(), c)
		}
	})
}

// Pending answers until the caller's deadline ends an attempt in flight.
func TestReview132PendingDeadlineNotFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("healthy", breaker.ConsecutiveFailures(3), breaker.OpenTimeout(time.Hour))
		p := pipeline.New(pipeline.WithBreaker(b),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(0), retrypolicy.BaseDelay(10*time.Millisecond), retrypolicy.MaxDelay(10*time.Millisecond))))
		op := func(ctx context.Context) (int, error) {
			select {
			case <-time.After(50 * time.Millisecond):
			case <-ctx.Done():
				return 0, ctx.Err()
			}
			return 0, resilience.RetryAfter(resilience.Pending(errors.New("409 in progress")), 10*time.Millisecond)
		}
		for range 5 {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_, err := pipeline.Do(ctx, p, op)
			t.Logf("%v", err)
			cancel()
		}
		if c := b.Counts(); c.TotalFailures != 0 || b.State() != resilience.StateClosed {
			t.Fatalf("breaker %v, counts %+v: pending answers then the deadline counted as failures", b.State(), c)
		}
	})
}
