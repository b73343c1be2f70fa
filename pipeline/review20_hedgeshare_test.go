package pipeline_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// TestReview20HedgeShareCountsCallsNotAttempts, from a review: MaxShare
// caps the hedges at a share of the calls, plus one; each attempt of the
// retry stage counted as a call, so that calls whose attempts were slow
// and failed got hedges for about MaxShare times MaxAttempts of them
// (41 for 100 calls of 4 attempts), in an outage.
func TestReview20HedgeShareCountsCallsNotAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var hedges atomic.Int64
		p := pipeline.New(pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(4), retrypolicy.BaseDelay(time.Millisecond))),
			pipeline.WithHedging(hedge.New(hedge.Delay(5*time.Millisecond), hedge.MaxShare(0.1))),
			pipeline.WithListener(resilience.ListenerFunc(func(e resilience.Event) {
				if e.Kind == resilience.EventHedged {
					hedges.Add(1)
				}
			})))
		errDown := errors.New("503")
		const calls = 100 // within one 10 s window of the hedges' budget
		for range calls {
			_, _ = pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
				select {
				case <-time.After(20 * time.Millisecond): // slow, then a 503
					return 0, errDown
				case <-ctx.Done():
					return 0, ctx.Err()
				}
			})
		}
		require.LessOrEqual(t, hedges.Load(), int64(calls/10+1), "hedges past MaxShare of the calls")
		require.Positive(t, hedges.Load())
	})
}
