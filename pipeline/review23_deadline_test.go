package pipeline_test

// Review 23: the callers' own deadlines that the pipeline no longer counts
// against the dependency (94fd901: inside/limitsOwn). Attack: a dependency
// that fails, or that hangs past the pipeline's own attempt timeout, but
// whose calls end with the caller's deadline.

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

var errReview23Unavailable = errors.New("503 service unavailable") // transient: a dependency's failure

// failsAfter is a dependency that answers every request with a failure
// after d (or ends with the context first).
func review23FailsAfter(d time.Duration, calls *atomic.Int64) func(ctx context.Context) (int, error) {
	return func(ctx context.Context) (int, error) {
		calls.Add(1)
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return 0, errReview23Unavailable
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// A dependency that answers every request with a 503 in 20 ms, called
// with retries under the callers' deadlines of 70 ms (the budgets an
// upstream sends): every call gets three 503s from the dependency and is
// ended by the caller's deadline during the fourth attempt. The breaker
// (5 consecutive failures) must open: the dependency failed every request
// it answered, and no deadline was "too short" for it.
func TestReview23CallersDeadlineHidesA503ingDependency(t *testing.T) {
	for _, tc := range []struct {
		name    string
		timeout time.Duration // the pipeline's attempt timeout: 0 none
	}{
		{"no attempt timeout (control)", 0},
		{"attempt timeout 1s", time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := breaker.New("review23-503", breaker.ConsecutiveFailures(5), breaker.OpenTimeout(time.Minute))
			p := pipeline.New(
				pipeline.WithBreaker(b),
				pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(10), retrypolicy.BaseDelay(time.Millisecond),
					retrypolicy.MaxDelay(2*time.Millisecond), retrypolicy.Jitter(retrypolicy.None))),
				pipeline.WithAttemptTimeout(tc.timeout),
			)
			var sent atomic.Int64
			op := review23FailsAfter(20*time.Millisecond, &sent)
			var rejected int
			for range 20 {
				ctx, cancel := context.WithTimeout(context.Background(), 70*time.Millisecond)
				_, err := pipeline.Do(ctx, p, op)
				cancel()
				require.Error(t, err)
				if breaker.IsRejection(err) {
					rejected++
				}
			}
			t.Logf("requests sent to a dependency answering 503 to all: %d; calls rejected by the breaker: %d of 20; breaker %v, counts %+v",
				sent.Load(), rejected, b.State(), b.Counts())
			assert.Equal(t, resilience.StateOpen, b.State(), "every request the dependency answered was a 503: the breaker must open")
		})
	}
}

// A dependency that hangs, behind an attempt timeout of 40 ms and 3
// attempts; callers' deadlines of 100 ms. Each call's first two attempts
// are cut by the pipeline's own attempt timeout (a dependency too slow,
// by the pipeline's own limit), the third by the caller's deadline. The
// breaker must open.
func TestReview23AttemptTimeoutsHiddenByTheLastAttempt(t *testing.T) {
	b := breaker.New("review23-hang", breaker.ConsecutiveFailures(5), breaker.OpenTimeout(time.Minute))
	var timedOut atomic.Int64
	p := pipeline.New(
		pipeline.WithBreaker(b),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond),
			retrypolicy.MaxDelay(2*time.Millisecond), retrypolicy.Jitter(retrypolicy.None))),
		pipeline.WithAttemptTimeout(40*time.Millisecond),
	)
	hang := func(ctx context.Context) (int, error) {
		<-ctx.Done()
		if context.Cause(ctx) == pipeline.ErrAttemptTimeout {
			timedOut.Add(1)
		}
		return 0, ctx.Err()
	}
	var rejected int
	for range 12 {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		_, err := pipeline.Do(ctx, p, hang)
		cancel()
		if breaker.IsRejection(err) {
			rejected++
		}
	}
	t.Logf("attempts cut by the pipeline's own attempt timeout: %d; calls rejected: %d of 12; breaker %v, counts %+v",
		timedOut.Load(), rejected, b.State(), b.Counts())
	require.GreaterOrEqual(t, timedOut.Load(), int64(10), "the dependency met the pipeline's attempt timeout")
	assert.Equal(t, resilience.StateOpen, b.State(), "a dependency that hung past the attempt timeout on every attempt must open the breaker")
}

// A time budget behind the breaker is one of the two limits that
// docs recommend ("Give the pipelines of a service behind Middleware an
// attempt timeout or a time budget"). A caller upstream with the same
// budget forwards what is left of it, always shorter than this service's:
// a dependency that hangs is then never counted, and every call waits out
// the caller's whole deadline, for ever.
func TestReview23BudgetOnlyLetsAHungDependencyEscape(t *testing.T) {
	b := breaker.New("review23-budget", breaker.ConsecutiveFailures(5), breaker.OpenTimeout(time.Minute))
	p := pipeline.New(pipeline.WithBreaker(b), pipeline.WithTimeBudget(200*time.Millisecond))
	hang := func(ctx context.Context) (int, error) { <-ctx.Done(); return 0, ctx.Err() }
	start := time.Now()
	var rejected int
	for range 10 {
		ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond) // the upstream's 200 ms, less its own 50
		_, err := pipeline.Do(ctx, p, hang)
		cancel()
		if breaker.IsRejection(err) {
			rejected++
		}
	}
	t.Logf("10 calls to a hung dependency took %v; rejected %d; breaker %v counts %+v", time.Since(start), rejected, b.State(), b.Counts())
	assert.Equal(t, resilience.StateOpen, b.State(), "a hung dependency must open the breaker")
}
