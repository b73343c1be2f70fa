package pipeline_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// The same with a caller's deadline that the loop sees it cannot reach
// before the retry (out of time at once, look-ahead).
func TestReview127DeadlineLookaheadBreaker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("r127d", breaker.ConsecutiveFailures(3))
		p := pipeline.New(
			pipeline.WithBreaker(b),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(time.Second), retrypolicy.Jitter(retrypolicy.None))),
		)
		sent := 0
		for range 20 {
			ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
			pipeline.Do(ctx, p, func(ctx context.Context) (int, error) {
				sent++
				time.Sleep(20 * time.Millisecond)
				return 0, errors.New("503")
			})
			cancel()
		}
		if sent > 3 {
			t.Errorf("sent %d; breaker %v, counts %+v", sent, b.State(), b.Counts())
		}
	})
}
