package limit

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The slot frees at the very instant the oldest waiter's deadline passes:
// whichever way it goes, the next waiter gets a slot, and none is lost.
func TestReview39GrantedAsDeadlinePasses(t *testing.T) {
	for range 50 {
		synctest.Test(t, func(t *testing.T) {
			l := NewFixed(1, MaxWaiting(10), OldestOnTime())
			tk, err := l.Acquire(context.Background())
			require.NoError(t, err)
			ctxA, cancelA := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancelA()
			aErr := make(chan error, 1)
			go func() {
				tk, err := l.Acquire(ctxA)
				if err == nil {
					l.Release(tk, nil)
				}
				aErr <- err
			}()
			bGot := make(chan Ticket, 1)
			go func() {
				tk, err := l.Acquire(context.Background())
				assert.NoError(t, err)
				bGot <- tk
			}()
			synctest.Wait()
			time.AfterFunc(100*time.Millisecond, func() { l.Release(tk, nil) })
			time.Sleep(100 * time.Millisecond)
			synctest.Wait()
			<-aErr
			tb := <-bGot
			assert.Equal(t, 1, l.InFlight())
			assert.Equal(t, 0, l.Waiting())
			l.Release(tb, nil)
			assert.Equal(t, 0, l.InFlight())
		})
	}
}

// A waiter moved to the late list, then cancelled, leaves it; the fast path
// opens again.
func TestReview39LateWaiterLeaves(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewFixed(1, MaxWaiting(10), OldestOnTime())
		tk, _ := l.Acquire(context.Background())
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		done := make(chan error, 1)
		go func() { _, err := l.Acquire(ctx); done <- err }()
		synctest.Wait()
		time.Sleep(900 * time.Millisecond) // overdue: 100 ms left of 900 waited
		// another holder: a waiter that arrives and the first's release
		ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel2()
		got := make(chan Ticket, 1)
		go func() { tk, err := l.Acquire(ctx2); assert.NoError(t, err); got <- tk }()
		synctest.Wait()
		l.Release(tk, nil) // the late one is moved to late; the new one is served
		tk2 := <-got
		assert.Equal(t, 1, l.Waiting())
		err := <-done
		assert.ErrorIs(t, err, ErrLimited)
		assert.Equal(t, 0, l.Waiting())
		l.Release(tk2, nil)
		tk3, err := l.Acquire(context.Background())
		require.NoError(t, err)
		assert.Zero(t, tk3&timed, "fast path")
		l.Release(tk3, nil)
	})
}
