package limit

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// An heir served a freed slot by grant leaves its stopped extra unclaimed
// (still running a moment); a plain waiter behind the other heirs then
// makes a new arrival refused at once (n=1 >= MaxWaiting 1), where the
// same calls without hedges leave the queue empty and the arrival waits.
func TestReview122PlainWaiterBehindHeirsRefusesArrival(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewFixed(6, MaxWaiting(1))
		ctx := context.Background()
		t1, _ := l.Acquire(ctx)
		_ = t1
		e1, err := l.AcquireExtra(func() {})
		if err != nil {
			t.Fatal(err)
		}
		e2, err := l.AcquireExtra(func() {})
		if err != nil {
			t.Fatal(err)
		}
		t2, _ := l.Acquire(ctx)
		l.Acquire(ctx)
		l.Acquire(ctx)
		type res struct {
			tk  Ticket
			err error
		}
		start := func() chan res {
			ch := make(chan res, 1)
			go func() {
				c, cancel := context.WithTimeout(ctx, time.Second)
				defer cancel()
				tk, err := l.Acquire(c)
				ch <- res{tk, err}
			}()
			synctest.Wait()
			return ch
		}
		h5 := start() // claims e2
		h6 := start() // claims e1
		p7 := start() // plain
		if l.Waiting() != 3 {
			t.Fatalf("waiting %d", l.Waiting())
		}
		l.Release(t2, nil) // a first attempt ends: H5 served
		if r := <-h5; r.err != nil {
			t.Fatal(r.err)
		}
		// call 8 arrives while the stopped e2 has not yet returned
		c8 := start()
		synctest.Wait()
		select {
		case r := <-c8:
			if errors.Is(r.err, ErrLimited) {
				t.Errorf("call 8 refused at once with %d in flight, %d waiting: without hedges the queue would be empty and it would wait", l.InFlight(), l.Waiting())
			}
		default:
		}
		l.Release(e2, nil)
		l.Release(e1, nil)
		<-h6
		<-p7
	})
}
