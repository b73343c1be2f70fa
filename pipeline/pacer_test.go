package pipeline

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/limit"
)

// TestThePacerServesTheOldestOnTime: WaitWhenOpen's pacer is a limiter
// whose queue, once its oldest waiter is late, gives a free slot to the
// oldest that still has time (limit.OldestOnTime), not to the newest: of
// waiters with budgets of 100 ms, 500 ms and 1 s, queued 1 ms apart, a
// slot freed 85 ms later goes to the second.
func TestThePacerServesTheOldestOnTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := New(WithBreaker(breaker.New("dep")), WaitWhenOpen()).cfg.pacer.limit
		var held []limit.Ticket
		for range l.Limit() {
			held = append(held, l.Enter())
		}
		got := make(chan int, 3)
		for i, d := range []time.Duration{100 * time.Millisecond, 500 * time.Millisecond, time.Second} {
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), d)
				defer cancel()
				if tk, err := l.Acquire(ctx); err == nil {
					got <- i
					l.Release(tk, limit.ErrLimited) // teaches nothing
				}
			}()
			time.Sleep(time.Millisecond)
		}
		time.Sleep(82 * time.Millisecond)
		require.Equal(t, 3, l.Waiting())
		l.Release(held[0], limit.ErrLimited) // one slot, and the limit as it was
		synctest.Wait()
		assert.Equal(t, 1, <-got, "the oldest with time for an answer, not the newest")
		for _, tk := range held[1:] {
			l.Release(tk, limit.ErrLimited)
		}
		synctest.Wait()
	})
}
