package pipeline_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/throttle"
)

// TestThrottleProbeRefusedByTheLimitIsOwed: the throttle lets one attempt
// a bucket through whatever it refuses, so that it hears within a bucket
// that the dependency is back. In a pipeline the limit comes after it: a
// probe that the full limit refuses was not sent, and the bucket's next
// attempt, once the limit has room, is its probe (review160: the bucket
// stayed silent). A probe that was sent and then canceled by its caller
// is no such attempt (review162: one probe a deadline).
func TestThrottleProbeRefusedByTheLimitIsOwed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		th := throttle.New(throttle.Window(10 * time.Second))
		lim := limit.NewFixed(1)
		p := pipeline.New(pipeline.WithThrottle(th), pipeline.WithLimit(lim))
		down := errors.New("503")
		for range 2000 {
			_, _ = pipeline.Do(context.Background(), p, func(context.Context) (int, error) { return 0, down })
		}
		require.Greater(t, th.RejectProbability(), 0.99)
		sent, silent := 0, 0
		for range 20 {
			time.Sleep(time.Second) // a new bucket
			tk, err := lim.Acquire(context.Background())
			require.NoError(t, err)
			_, err = pipeline.Do(context.Background(), p, func(context.Context) (int, error) { sent++; return 0, down })
			require.ErrorIs(t, err, limit.ErrLimited, "the probe, refused by the full limit")
			lim.Release(tk, nil)
			got := false
			for range 5 { // the bucket's next attempt is its probe
				if _, err := pipeline.Do(context.Background(), p, func(context.Context) (int, error) { sent++; return 0, down }); !errors.Is(err, throttle.ErrThrottled) {
					got = true
					break
				}
			}
			if !got {
				silent++
			}
		}
		assert.Zero(t, silent, "buckets whose probe the limit refused sent nothing")
		assert.Equal(t, 20, sent, "one probe a bucket reached the dependency")

		// Sent, then canceled: the bucket has had its probe.
		for range 2000 {
			_, _ = pipeline.Do(context.Background(), p, func(context.Context) (int, error) { return 0, down })
		}
		require.Greater(t, th.RejectProbability(), 0.99)
		time.Sleep(time.Second)
		reached := 0
		for range 20 {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
			_, _ = pipeline.Do(ctx, p, func(ctx context.Context) (int, error) { reached++; <-ctx.Done(); return 0, ctx.Err() })
			cancel()
		}
		assert.LessOrEqual(t, reached, 2, "probes canceled by their callers' deadlines within one bucket")
	})
}
