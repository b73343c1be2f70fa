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

// A call that waited out the open breaker with almost none of its own
// budget left becomes the probe; the dependency is healthy again (10 ms
// answers). Its probe runs out of the pipeline's budget: does the breaker
// open again and refuse the next caller, who has all the time it needs?
func TestReview127StarvedProbeReopens(t *testing.T) {
	for _, slack := range []time.Duration{time.Nanosecond, time.Millisecond, 5 * time.Millisecond} {
		synctest.Test(t, func(t *testing.T) {
			b := breaker.New("r127p", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(500*time.Millisecond))
			p := pipeline.New(
				pipeline.WithTimeBudget(500*time.Millisecond+slack),
				pipeline.WithBreaker(b),
				pipeline.WaitWhenOpen(),
				pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3))),
			)
			healthy := false
			op := func(ctx context.Context) (int, error) {
				if !healthy {
					return 0, resilience.Terminal(errors.New("down"))
				}
				select {
				case <-time.After(10 * time.Millisecond):
					return 1, nil
				case <-ctx.Done():
					return 0, ctx.Err()
				}
			}
			pipeline.Do(t.Context(), p, op) // opens it
			healthy = true
			_, err1 := pipeline.Do(t.Context(), p, op) // waits ~500ms, probes with slack left
			st := b.State()
			start := time.Now()
			_, err2 := pipeline.Do(t.Context(), p, op)
			t.Logf("slack %v: waiting call: %v; state after: %v; next call after %v: %v; counts %+v", slack, err1, st, time.Since(start), err2, b.Counts())
			if err2 != nil || st == resilience.StateOpen {
				t.Errorf("slack %v: a starved probe reopened the breaker of a healthy dependency: next call %v", slack, err2)
			}
		})
	}
}
