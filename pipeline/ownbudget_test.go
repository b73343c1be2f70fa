package pipeline_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// A call that runs out of time says whose time it was: the pipeline's own
// budget, when it came before the caller's deadline (the caller may try
// again), or the caller's, before a retry it had no time for too.
func TestOutOfTimeSaysWhoseBudget(t *testing.T) {
	failing := func(context.Context) (int, error) { return 0, errors.New("503") }
	hanging := func(ctx context.Context) (int, error) { <-ctx.Done(); return 0, ctx.Err() }
	for _, tc := range []struct {
		name           string
		budget, caller time.Duration // 0: none
		op             func(context.Context) (int, error)
		own            bool
	}{
		{"budget first, no retry in time", 50 * time.Millisecond, time.Second, failing, true},
		{"budget first, the attempt cut", 50 * time.Millisecond, time.Second, hanging, true},
		{"budget, caller without deadline", 50 * time.Millisecond, 0, hanging, true},
		{"caller first, no retry in time", time.Second, 50 * time.Millisecond, failing, false},
		{"caller first, the attempt cut", time.Second, 50 * time.Millisecond, hanging, false},
		{"no budget", 0, 50 * time.Millisecond, failing, false},
	} {
		for _, withBreaker := range []bool{false, true} {
			t.Run(tc.name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					opts := []pipeline.Option{pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(time.Second), retrypolicy.MaxDelay(time.Second)))}
					if tc.budget > 0 {
						opts = append(opts, pipeline.WithTimeBudget(tc.budget))
					}
					if withBreaker {
						opts = append(opts, pipeline.WithBreaker(breaker.New("dep")))
					}
					ctx := context.Background()
					if tc.caller > 0 {
						var cancel context.CancelFunc
						ctx, cancel = context.WithTimeout(ctx, tc.caller)
						defer cancel()
					}
					_, err := pipeline.Do(ctx, pipeline.New(opts...), tc.op)
					var re *retrypolicy.Error
					require.ErrorAs(t, err, &re)
					require.ErrorIs(t, re.Reason, retrypolicy.ErrOutOfTime)
					assert.Equal(t, tc.own, re.OwnBudget, "%T %v", err, err)
				})
			})
		}
	}
}
