package breaker_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
)

// TestProbeGoesToTheWaiterWithTheMostTimeLeft: when the breaker turns
// half-open, its probe is the waiter whose deadline comes last (one
// without a deadline first), not the oldest, which may have too little
// time left to get an answer; on closing, every waiter goes.
func TestProbeGoesToTheWaiterWithTheMostTimeLeft(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("dep", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(time.Second))
		require.ErrorIs(t, b.Execute(t.Context(), func(context.Context) error { return errDown }), errDown)
		budgets := []time.Duration{1100 * time.Millisecond, 3 * time.Second, 2 * time.Second, 0} // 0: no deadline
		var mu sync.Mutex
		var order []int
		var wg sync.WaitGroup
		for i, d := range budgets {
			wg.Go(func() {
				time.Sleep(time.Duration(i) * time.Millisecond) // in this order
				ctx := t.Context()
				if d > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, d)
					defer cancel()
				}
				err := waitAndRun(ctx, b, func(context.Context) error {
					mu.Lock()
					order = append(order, i)
					mu.Unlock()
					time.Sleep(10 * time.Millisecond)
					return nil
				})
				assert.NoError(t, err)
			})
		}
		wg.Wait()
		require.Len(t, order, 4)
		assert.Equal(t, 3, order[0], "the probe: the waiter without a deadline")
		assert.ElementsMatch(t, []int{0, 1, 2}, order[1:], "then, closed, every waiter")
	})
}
