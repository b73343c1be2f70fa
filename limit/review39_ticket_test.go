package limit

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var r39Fail = errors.New("dependency failed")

// An answer across the 12-day wrap of a timed Ticket's milliseconds is
// measured right.
func TestReview39TimedTicketAcrossWrap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewFixed(1, MaxWaiting(10), OldestOnTime())
		time.Sleep((1<<msBits - 5) * time.Millisecond)
		tk0, err := l.Acquire(context.Background())
		require.NoError(t, err)
		got := make(chan Ticket)
		go func() {
			tk, err := l.Acquire(context.Background())
			assert.NoError(t, err)
			got <- tk
		}()
		synctest.Wait()
		l.Release(tk0, nil)
		tk := <-got
		require.NotZero(t, tk&timed)
		assert.Equal(t, Ticket(1<<msBits-5), tk>>32&(1<<msBits-1))
		time.Sleep(12 * time.Millisecond)
		l.Release(tk, nil)
		assert.Equal(t, 12*time.Millisecond, l.answer)
		assert.Equal(t, 0, l.InFlight())
	})
}

// Rounds past 2^32: a Ticket from the round before the wrap does not
// decrease the limit again; the zero Ticket is never given.
func TestReview39RoundWrap(t *testing.T) {
	l := NewAIMD(Initial(100), Backoff(0.5))
	l.round = 1<<32 - 1
	tk1 := l.Enter()
	tk2 := l.Enter()
	l.Release(tk1, r39Fail)
	assert.Equal(t, 50, l.Limit())
	l.Release(tk2, r39Fail)
	assert.Equal(t, 50, l.Limit(), "the same congestion")
	tk3, err := l.Acquire(context.Background())
	require.NoError(t, err)
	assert.NotZero(t, tk3)
	assert.Equal(t, uint32(0), uint32(tk3))
	l.Release(tk3, r39Fail)
	assert.Equal(t, 25, l.Limit())
	assert.Equal(t, 0, l.InFlight())
}
