package pipeline_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// TestACallersShortDeadlineIsNotTheDependencys: a caller whose own
// deadline (5 ms: a budget sent by a caller upstream, say) is shorter than
// the pipeline's own limits (an attempt timeout, a time budget) runs out
// of time against a healthy dependency that answers in 30 ms: the breaker
// does not count it, where it opened on the first (a review: five such
// requests opened a service's breaker, which then failed its other
// calls). A dependency slower than the pipeline's own limits still
// counts, and without such a limit the caller's deadline does, as it is
// all that finds a dependency that hangs.
func TestACallersShortDeadlineIsNotTheDependencys(t *testing.T) {
	healthy := func(ctx context.Context) (int, error) {
		select {
		case <-time.After(30 * time.Millisecond):
			return 1, nil
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	hangs := func(ctx context.Context) (int, error) { <-ctx.Done(); return 0, ctx.Err() }
	for _, tc := range []struct {
		name   string
		opt    pipeline.Option
		caller time.Duration
		op     func(context.Context) (int, error)
		opens  bool
	}{
		{"a caller's deadline under the attempt timeout", pipeline.WithAttemptTimeout(time.Second), 5 * time.Millisecond, healthy, false},
		{"a caller's deadline under the time budget", pipeline.WithTimeBudget(time.Second), 5 * time.Millisecond, healthy, false},
		{"the attempt timeout first", pipeline.WithAttemptTimeout(10 * time.Millisecond), time.Second, hangs, true},
		{"the time budget first", pipeline.WithTimeBudget(10 * time.Millisecond), time.Second, hangs, true},
		{"no limit of the pipeline's", nil, 5 * time.Millisecond, healthy, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := breaker.New(t.Name(), breaker.ConsecutiveFailures(1), breaker.OpenTimeout(time.Minute))
			p := pipeline.New(pipeline.WithBreaker(b), pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(2), retrypolicy.BaseDelay(time.Millisecond))), tc.opt)
			ctx, cancel := context.WithTimeout(context.Background(), tc.caller)
			defer cancel()
			_, err := pipeline.Do(ctx, p, tc.op)
			require.Error(t, err)
			assert.ErrorIs(t, err, context.DeadlineExceeded, "the caller sees its deadline")
			if tc.opens {
				assert.Equal(t, resilience.StateOpen, b.State(), "counted")
				return
			}
			assert.Equal(t, resilience.StateClosed, b.State(), "not counted")
			got, err := pipeline.Do(context.Background(), p, healthy)
			assert.NoError(t, err)
			assert.Equal(t, 1, got)
		})
	}
}
