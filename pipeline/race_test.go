package pipeline_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// TestRaceEnds: how a hedged attempt ends, case by case: the answer it
// returns, how many attempts were sent, and how many were canceled.
func TestRaceEnds(t *testing.T) {
	errA, errB := errors.New("a"), errors.New("b")
	// hang waits for ctx and counts the cancellation.
	hang := func(ctx context.Context, canceled *atomic.Int64) (int, error) {
		<-ctx.Done()
		canceled.Add(1)
		return 0, ctx.Err()
	}
	tests := []struct {
		name     string
		extra    int
		op       func(n int64, ctx context.Context, canceled *atomic.Int64) (int, error)
		want     int
		err      error
		sent     int64
		canceled int64
	}{
		{"the first answers while its hedge hangs: the hedge is canceled", 1,
			func(n int64, ctx context.Context, c *atomic.Int64) (int, error) {
				if n == 1 {
					time.Sleep(15 * time.Millisecond)
					return 1, nil
				}
				return hang(ctx, c)
			}, 1, nil, 2, 1},
		{"two hedges, the second wins: the others are canceled", 2,
			func(n int64, ctx context.Context, c *atomic.Int64) (int, error) {
				if n < 3 {
					return hang(ctx, c)
				}
				time.Sleep(5 * time.Millisecond)
				return 3, nil
			}, 3, nil, 3, 2},
		{"all fail, no hints: the last failure is the answer", 1,
			func(n int64, ctx context.Context, c *atomic.Int64) (int, error) {
				if n == 1 {
					time.Sleep(20 * time.Millisecond)
					return 0, errA
				}
				time.Sleep(20 * time.Millisecond)
				return 0, errB
			}, 0, errB, 2, 0},
		{"all refused on our side after they were sent: the refusal is the answer, not a success", 1,
			func(n int64, ctx context.Context, c *atomic.Int64) (int, error) {
				time.Sleep(time.Duration(10+10*n) * time.Millisecond)
				return 0, resilience.Rejected(errA)
			}, 0, errA, 2, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var n, canceled atomic.Int64
				p := pipeline.New(pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(1))),
					pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxExtra(tt.extra))))
				got, err := pipeline.Do(t.Context(), p, func(ctx context.Context) (int, error) {
					return tt.op(n.Add(1), ctx, &canceled)
				})
				if tt.err != nil {
					require.ErrorIs(t, err, tt.err)
				} else {
					require.NoError(t, err)
				}
				assert.Equal(t, tt.want, got)
				synctest.Wait()
				assert.Equal(t, tt.sent, n.Load(), "attempts sent")
				assert.Equal(t, tt.canceled, canceled.Load(), "attempts canceled")
			})
		})
	}
}

// TestRefusedFirstAttemptIsNotHedged: a hedged call whose first attempt
// the gates refuse returns that refusal, and sends nothing later.
func TestRefusedFirstAttemptIsNotHedged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := limit.NewFixed(1)
		held, err := l.Acquire(t.Context())
		require.NoError(t, err)
		var n atomic.Int64
		p := pipeline.New(pipeline.WithLimit(l), pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond))))
		_, err = pipeline.Do(t.Context(), p, func(context.Context) (int, error) { n.Add(1); return 1, nil })
		require.ErrorIs(t, err, limit.ErrLimited)
		time.Sleep(time.Second)
		assert.Zero(t, n.Load())
		l.Release(held, nil)
	})
}
