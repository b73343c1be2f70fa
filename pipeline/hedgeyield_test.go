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

	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// A hedge holds a slot of a limit of 4; three calls come: the third takes
// the hedge's slot, and the hedge, stopped, is no answer of its call,
// whose first attempt then fails and is retried: every call succeeds, as
// without hedging, and the limit ends empty.
func TestAHedgeGivesItsSlotToAnotherCallsAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := limit.NewFixed(4)
		p := pipeline.New(pipeline.WithLimit(l),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(2), retrypolicy.BaseDelay(time.Millisecond))),
			pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxShare(1))))
		var mu sync.Mutex
		hedges := 0
		var wg sync.WaitGroup
		wg.Go(func() { // call A
			attempts := 0
			_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
				mu.Lock()
				attempts++
				n := attempts
				if p.IsHedge(ctx) {
					hedges++
				}
				mu.Unlock()
				switch {
				case p.IsHedge(ctx): // hangs until stopped
					<-ctx.Done()
					return 0, ctx.Err()
				case n == 1:
					time.Sleep(100 * time.Millisecond)
					return 0, errors.New("503")
				}
				return 1, nil
			})
			assert.NoError(t, err, "call A")
		})
		time.Sleep(20 * time.Millisecond) // A's hedge is out: 2 of 4 slots
		require.Equal(t, 2, l.InFlight())
		for i := range 3 {
			wg.Go(func() {
				_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
					time.Sleep(50 * time.Millisecond)
					return 1, nil
				})
				assert.NoError(t, err, "call %d", i)
			})
		}
		wg.Wait()
		assert.Equal(t, 1, hedges)
		assert.Zero(t, l.InFlight())
	})
}
