package pipeline_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/throttle"
)

// Callers whose deadlines are shorter than a healthy dependency's answers
// (30 ms): their attempts run out of time, and neither the throttle nor
// an adaptive limit learns from them, so that the callers with time enough
// are neither refused nor queued. The expiries of the pipeline's own
// attempt timeout and time budget still count.
func TestShortDeadlinesTeachTheGatesNothing(t *testing.T) {
	answer := answerIn(30 * time.Millisecond)
	call := func(p *pipeline.Pipeline, d time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		_, err := pipeline.Do(ctx, p, answer)
		return err
	}
	synctest.Test(t, func(t *testing.T) {
		th := throttle.New()
		l := limit.NewAIMD(limit.Initial(4), limit.Min(1))
		p := pipeline.New(pipeline.WithRetry(retrypolicy.New()), pipeline.WithThrottle(th), pipeline.WithLimit(l))
		for range 100 {
			require.ErrorIs(t, call(p, 5*time.Millisecond), context.DeadlineExceeded)
		}
		assert.Zero(t, th.RejectProbability())
		assert.Equal(t, 4, l.Limit())
		for range 10 {
			require.NoError(t, call(p, time.Second))
		}

		// The attempt timeout is the pipeline's own: its expiries count.
		th, l = throttle.New(), limit.NewAIMD(limit.Initial(4), limit.Min(1))
		p = pipeline.New(pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(1))), pipeline.WithThrottle(th),
			pipeline.WithLimit(l), pipeline.WithAttemptTimeout(5*time.Millisecond))
		for range 10 { // the throttle refuses nothing before 10 answers
			require.ErrorIs(t, call(p, time.Second), pipeline.ErrAttemptTimeout)
		}
		assert.Positive(t, th.RejectProbability())
		assert.Equal(t, 2, l.Limit(), "4 * 0.9^10 = 1.4: two let in")
	})
	// So are the time budget's.
	synctest.Test(t, func(t *testing.T) {
		th := throttle.New()
		l := limit.NewAIMD(limit.Initial(4), limit.Min(1))
		p := pipeline.New(pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(1))), pipeline.WithThrottle(th),
			pipeline.WithLimit(l), pipeline.WithTimeBudget(5*time.Millisecond))
		for range 10 {
			require.ErrorIs(t, call(p, time.Second), context.DeadlineExceeded)
		}
		assert.Positive(t, th.RejectProbability())
		assert.Equal(t, 2, l.Limit(), "4 * 0.9^10 = 1.4: two let in")
	})
}

// answerIn is a healthy dependency that answers in d, or when its
// caller's context ends.
func answerIn(d time.Duration) func(ctx context.Context) (int, error) {
	return func(ctx context.Context) (int, error) {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return 1, nil
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}
