package pipeline_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// TestHedgedSaysAHedgeWasSent: a failed call whose hedging sent a hedge
// says so (pipeline.Hedged), whether the retry stage made one attempt or
// the pipeline has none, so that the caller is told not to retry what
// reached the dependency twice; the error is otherwise the attempts'. A
// call that failed before its hedge was due, or succeeded, does not.
func TestHedgedSaysAHedgeWasSent(t *testing.T) {
	errBoom := errors.New("boom")
	hedging := func() pipeline.Option { return pipeline.WithHedging(hedge.New(hedge.Delay(10 * time.Millisecond))) }
	for _, tc := range []struct {
		name   string
		opts   []pipeline.Option
		takes  time.Duration // the operation's time
		err    error
		hedged bool
		sent   int32
	}{
		{"one attempt, slow", []pipeline.Option{pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(1))), hedging()}, 50 * time.Millisecond, errBoom, true, 2},
		{"no retry stage, slow", []pipeline.Option{hedging()}, 50 * time.Millisecond, errBoom, true, 2},
		{"one attempt, fast", []pipeline.Option{pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(1))), hedging()}, time.Millisecond, errBoom, false, 1},
		{"succeeds, slow", []pipeline.Option{hedging()}, 50 * time.Millisecond, nil, false, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := pipeline.New(tc.opts...)
				var sent atomic.Int32
				_, err := pipeline.Do(t.Context(), p, func(ctx context.Context) (int, error) {
					sent.Add(1)
					select {
					case <-time.After(tc.takes):
						return 0, tc.err
					case <-ctx.Done(): // a loser
						return 0, ctx.Err()
					}
				})
				time.Sleep(time.Second) // the losers end
				assert.Equal(t, tc.sent, sent.Load())
				assert.Equal(t, tc.hedged, pipeline.Hedged(err), "Hedged(%v)", err)
				if tc.err != nil {
					assert.ErrorIs(t, err, tc.err)
					assert.Contains(t, err.Error(), "boom")
				} else {
					assert.NoError(t, err)
				}
			})
		})
	}
	assert.False(t, pipeline.Hedged(nil))
	assert.False(t, pipeline.Hedged(errBoom))
}
