package limit_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/limit"
)

// While an heir waits for its stopped hedge, a slot that frees goes to an
// attempt that came after it, and even to a new hedge (AcquireExtra sees
// no waiter): the heir is passed over, with a slot free.
func TestReview121HeirPassedOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := limit.NewFixed(8)
		ctx := context.Background()
		a, _ := l.Acquire(ctx)
		h, err := l.AcquireExtra(func() {}) // a hedge that is slow to stop
		if err != nil {
			t.Fatal(err)
		}
		var fill []limit.Ticket
		for range 6 {
			tk, err := l.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			fill = append(fill, tk)
		}
		done := make(chan error, 1)
		dctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		go func() {
			tk, err := l.Acquire(dctx) // the heir
			if err == nil {
				l.Release(tk, nil)
			}
			done <- err
		}()
		synctest.Wait()
		// Others end: five slots free, the heir still waits.
		for _, tk := range fill {
			l.Release(tk, nil)
		}
		l.Release(a, nil)
		synctest.Wait()
		served := false
		select {
		case err := <-done:
			served = true
			if err != nil {
				t.Errorf("heir: %v", err)
			}
		default:
			t.Errorf("the heir still waits with %d of %d slots in flight (only its stopped hedge)", l.InFlight(), l.Limit())
		}
		// A newcomer is admitted at once, and a new hedge too, while the heir waits.
		e, err := l.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if x, err := l.AcquireExtra(func() {}); err == nil {
			if !served {
				t.Errorf("a new hedge got a slot while an attempt waited for one")
			}
			l.Release(x, nil)
		}
		time.Sleep(2 * time.Second)
		if !served {
			if err := <-doneOr(done); err != nil {
				t.Errorf("the heir failed (%v, limited %v) though slots were free for its whole wait", err, errors.Is(err, limit.ErrLimited))
			}
		}
		l.Release(e, nil)
		l.Release(h, context.Canceled)
		if n := l.InFlight(); n != 0 {
			t.Errorf("in flight %d at the end", n)
		}
	})
}

func doneOr(c chan error) chan error {
	select {
	case err := <-c:
		r := make(chan error, 1)
		r <- err
		return r
	default:
		r := make(chan error, 1)
		r <- errors.New("still waiting")
		return r
	}
}

// An adaptive limit that falls while an heir waits: the stopped hedge's
// Release hands its slot to the heir whatever the limit is now, so an
// attempt is let in with more in flight than the limit (review120's
// finding, by a fall after the heir came rather than before).
func TestReview121HeirAdmittedAboveFallenLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := limit.NewAIMD(limit.Initial(8), limit.Backoff(0.5))
		ctx := context.Background()
		a, _ := l.Acquire(ctx)
		h, err := l.AcquireExtra(func() {})
		if err != nil {
			t.Fatal(err)
		}
		var fill []limit.Ticket
		for range 6 {
			tk, err := l.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			fill = append(fill, tk)
		}
		type res struct {
			tk       limit.Ticket
			err      error
			inFlight int
			limit    int
		}
		done := make(chan res, 1)
		go func() {
			tk, err := l.Acquire(ctx)
			done <- res{tk, err, l.InFlight(), l.Limit()}
		}()
		synctest.Wait()
		// The dependency fails one attempt: the limit halves, to 4; 7 in flight.
		l.Release(fill[0], errors.New("503"))
		if got := l.Limit(); got != 4 {
			t.Fatalf("limit %d, want 4", got)
		}
		// The hedge returns: its slot goes to the heir.
		l.Release(h, context.Canceled)
		synctest.Wait()
		select {
		case r := <-done:
			if r.err == nil {
				t.Errorf("an attempt was admitted with %d in flight (itself included) at a limit of %d", r.inFlight, r.limit)
				l.Release(r.tk, nil)
			}
		default:
		}
		for _, tk := range fill[1:] {
			l.Release(tk, nil)
		}
		l.Release(a, nil)
		synctest.Wait()
		select {
		case r := <-done:
			if r.err == nil {
				l.Release(r.tk, nil)
			}
		default:
		}
	})
}
