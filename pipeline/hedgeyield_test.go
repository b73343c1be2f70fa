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

// A hedge stopped for another call's attempt that still answers: with Do
// its answer is whole, and is the call's; with DoStream it is a stream
// whose context is canceled, no answer, and the first attempt's is.
func TestAStoppedHedgeThatAnswers(t *testing.T) {
	for _, stream := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			l := limit.NewFixed(4)
			p := pipeline.New(pipeline.WithLimit(l), pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxShare(1))))
			answer := make(chan struct{})
			op := func(ctx context.Context) (string, error) {
				if p.IsHedge(ctx) {
					<-answer // comes whatever its context says
					return "hedge", nil
				}
				select {
				case <-time.After(200 * time.Millisecond):
					return "first", nil
				case <-ctx.Done():
					return "", ctx.Err()
				}
			}
			var got string
			var err error
			done := make(chan struct{})
			go func() {
				defer close(done)
				if stream {
					var release func()
					got, release, err = pipeline.DoStream(context.Background(), p, op)
					release()
				} else {
					got, err = pipeline.Do(context.Background(), p, op)
				}
			}()
			time.Sleep(20 * time.Millisecond)
			var wg sync.WaitGroup
			for range 3 {
				wg.Go(func() {
					_, err := pipeline.Do(context.Background(), pipeline.New(pipeline.WithLimit(l)), func(context.Context) (int, error) {
						time.Sleep(time.Second)
						return 1, nil
					})
					assert.NoError(t, err)
				})
			}
			synctest.Wait()
			start := time.Now()
			close(answer)
			<-done
			require.NoError(t, err)
			if stream {
				assert.Equal(t, "first", got)
			} else {
				assert.Equal(t, "hedge", got)
				assert.Zero(t, time.Since(start), "at once")
			}
			wg.Wait()
			assert.Zero(t, l.InFlight())
		})
	}
}
