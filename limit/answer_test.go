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

// TestTheAnswerTimeIsTheMeanOfSuccessesFromTheQueue: with OldestOnTime,
// an attempt granted from the queue is timed from its grant; its success
// moves the answer time an eighth of the way to it (the first at once), a
// failure or an attempt admitted at once does not move it, and a waiter
// that finds the queue empty clears it. Without the option nothing is
// timed.
func TestTheAnswerTimeIsTheMeanOfSuccessesFromTheQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewFixed(1, MaxWaiting(10), OldestOnTime())
		held, err := l.Acquire(context.Background())
		require.NoError(t, err)
		assert.Zero(t, held&timed, "admitted at once: not timed")

		wait := func() <-chan Ticket { // a waiter, in the queue once this returns
			got := make(chan Ticket, 1)
			go func() {
				tk, err := l.Acquire(context.Background())
				assert.NoError(t, err)
				got <- tk
			}()
			synctest.Wait()
			return got
		}
		answer := func() time.Duration {
			l.mu.Lock()
			defer l.mu.Unlock()
			return l.answer
		}

		a, b := wait(), wait() // a standing queue: the second finds it in use
		l.Release(held, nil)
		held = <-a
		require.NotZero(t, held&timed, "granted from the queue: timed")
		c := wait()
		time.Sleep(400 * time.Millisecond)
		l.Release(held, nil)
		assert.Equal(t, 400*time.Millisecond, answer(), "the first success")

		held = <-b
		d := wait()
		time.Sleep(80 * time.Millisecond)
		l.Release(held, nil)
		assert.Equal(t, 360*time.Millisecond, answer(), "an eighth of the way to 80 ms")

		held = <-c
		time.Sleep(time.Millisecond)
		l.Release(held, errors.New("503"))
		assert.Equal(t, 360*time.Millisecond, answer(), "a failure, however fast, is not an answer time")

		held = <-d // the queue is empty now
		e := wait()
		assert.Zero(t, answer(), "a waiter that finds the queue empty clears it")
		l.Release(held, nil)
		l.Release(<-e, nil)

		plain := NewFixed(1, MaxWaiting(1))
		first, err := plain.Acquire(context.Background())
		require.NoError(t, err)
		got := make(chan Ticket, 1)
		go func() {
			tk, _ := plain.Acquire(context.Background())
			got <- tk
		}()
		synctest.Wait()
		plain.Release(first, nil)
		second := <-got
		assert.Zero(t, second&timed, "without OldestOnTime, nothing is timed")
		plain.Release(second, nil)
	})
}
