package limit_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/limit"
)

// TestTicketQueued: a slot taken at once is not queued; one granted from
// the queue is, in either order of the queue and on an adaptive limit.
func TestTicketQueued(t *testing.T) {
	for name, newLimiter := range map[string]func() *limit.Limiter{
		"fixed":          func() *limit.Limiter { return limit.NewFixed(1, limit.MaxWaiting(10)) },
		"oldest on time": func() *limit.Limiter { return limit.NewFixed(1, limit.MaxWaiting(10), limit.OldestOnTime()) },
		"aimd":           func() *limit.Limiter { return limit.NewAIMD(limit.Initial(1), limit.Min(1), limit.MaxWaiting(10)) },
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := newLimiter()
				first, err := l.Acquire(context.Background())
				require.NoError(t, err)
				assert.False(t, first.Queued(), "taken at once")
				got := make(chan limit.Ticket)
				go func() {
					tk, err := l.Acquire(context.Background())
					assert.NoError(t, err)
					got <- tk
				}()
				synctest.Wait()
				time.Sleep(time.Millisecond)
				l.Release(first, nil)
				second := <-got
				assert.True(t, second.Queued(), "granted from the queue")
				l.Release(second, nil)
				third, err := l.Acquire(context.Background())
				require.NoError(t, err)
				assert.False(t, third.Queued(), "taken at once again")
				l.Release(third, nil)
			})
		})
	}
}
