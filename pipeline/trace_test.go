package pipeline_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// attempts is a Tracer that keeps what it is told of each attempt.
type attempts struct {
	mu    sync.Mutex
	infos []resilience.AttemptInfo
	ended []error
}

func (a *attempts) StartCall(ctx context.Context, _ string) (context.Context, resilience.CallTrace) {
	return ctx, a
}

func (a *attempts) StartAttempt(ctx context.Context, info resilience.AttemptInfo) (context.Context, func(error)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.infos = append(a.infos, info)
	return ctx, func(err error) {
		a.mu.Lock()
		defer a.mu.Unlock()
		a.ended = append(a.ended, err)
	}
}

func (a *attempts) End(error) {}

// TestTracerHearsEachAttempt: each attempt is numbered from 1, with the
// delay since the one before ended, the retry-after hint it kept to, and
// the breaker's state as it starts.
func TestTracerHearsEachAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := &attempts{}
		b := breaker.New("dep", breaker.ConsecutiveFailures(0))
		p := pipeline.New(pipeline.WithTracer(tr), pipeline.WithBreaker(b),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(10*time.Millisecond), retrypolicy.Jitter(retrypolicy.None))))
		errDown := errors.New("503")
		n := 0
		_, err := pipeline.Do(t.Context(), p, func(context.Context) (int, error) {
			n++
			time.Sleep(5 * time.Millisecond)
			switch n {
			case 1:
				return 0, errDown
			case 2:
				return 0, resilience.RetryAfter(errDown, 50*time.Millisecond)
			}
			return 1, nil
		})
		require.NoError(t, err)
		assert.Equal(t, []resilience.AttemptInfo{
			{Number: 1, State: resilience.StateClosed},
			{Number: 2, Delay: 10 * time.Millisecond, State: resilience.StateClosed},
			{Number: 3, Delay: 50 * time.Millisecond, RetryAfter: 50 * time.Millisecond, State: resilience.StateClosed},
		}, tr.infos)
		assert.Equal(t, []error{errDown, resilience.RetryAfter(errDown, 50*time.Millisecond), nil}, tr.ended)
	})
}

// TestAttemptTimeoutIsNamedOnlyForItself: an attempt that its own timeout
// ended says so; one ended by the budget, or failing with a deadline error
// of its own making, does not.
func TestAttemptTimeoutIsNamedOnlyForItself(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hang := func(ctx context.Context) (int, error) { <-ctx.Done(); return 0, ctx.Err() }
		one := retrypolicy.New(retrypolicy.MaxAttempts(1))

		_, err := pipeline.Do(t.Context(), pipeline.New(pipeline.WithRetry(one), pipeline.WithAttemptTimeout(100*time.Millisecond)), hang)
		require.ErrorIs(t, err, pipeline.ErrAttemptTimeout)
		assert.Contains(t, err.Error(), "attempt timeout (100ms) exceeded")

		_, err = pipeline.Do(t.Context(), pipeline.New(pipeline.WithRetry(one), pipeline.WithTimeBudget(50*time.Millisecond),
			pipeline.WithAttemptTimeout(100*time.Millisecond)), hang)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.NotErrorIs(t, err, pipeline.ErrAttemptTimeout, "the budget ended it")

		own := func(context.Context) (int, error) { return 0, context.DeadlineExceeded } // a deadline of the operation's own
		_, err = pipeline.Do(t.Context(), pipeline.New(pipeline.WithRetry(one), pipeline.WithAttemptTimeout(time.Second)), own)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.NotErrorIs(t, err, pipeline.ErrAttemptTimeout, "its own deadline, not the attempt timeout")
	})
}
