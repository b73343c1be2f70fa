package pipeline_test

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// A Discard function that panics, on the caller's goroutine or on the
// pipeline's after the call returned: logged, not propagated; the call
// returns the winner's answer, and every loser's result is still given to
// Discard, once (no response left unclosed), the winner's never.
func TestReview22PanickingDiscardLeavesNoLoserBehind(t *testing.T) {
	for _, noPanic := range []bool{true, false} {
		t.Run(map[bool]string{true: "no_panic", false: "panic"}[noPanic], func(t *testing.T) { review22Discard(t, noPanic) })
	}
}

func review22Discard(t *testing.T, noPanic bool) {
	p := pipeline.New(
		pipeline.WithHedging(hedge.New(hedge.Delay(5*time.Millisecond), hedge.MaxExtra(3), hedge.MaxShare(1))),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(1))),
	)
	for run := range 150 {
		var n, returned atomic.Int64
		var mu sync.Mutex
		discarded := map[int64]int{}
		res, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int64, error) {
			i := n.Add(1)
			defer returned.Add(1)
			if i == 3 { // the third wins, if it runs
				return i, nil
			}
			select { // the others return once canceled, or late
			case <-ctx.Done():
			case <-time.After(time.Duration(run%3) * 10 * time.Millisecond):
			}
			runtime.Gosched()
			return i, nil
		}, pipeline.Discard(func(v int64) {
			mu.Lock()
			discarded[v]++
			mu.Unlock()
			if !noPanic {
				panic("discard panics")
			}
		}))
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			mu.Lock()
			defer mu.Unlock()
			if returned.Load() != n.Load() {
				return false
			}
			for i := int64(1); i <= n.Load(); i++ {
				if i != res && discarded[i] != 1 {
					return false
				}
			}
			return true
		}, 2*time.Second, time.Millisecond)
		mu.Lock()
		assert.Zero(t, discarded[res], "run %d: the winner was discarded", run)
		mu.Unlock()
	}
}
