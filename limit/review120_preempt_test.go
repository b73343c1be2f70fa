package limit_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"

	"github.com/resiliencekit/resiliencekit/limit"
)

var errReview120Overload = errors.New("overload") // class transient: a failure

// An adaptive limit that has just fallen (the dependency overloaded) below
// the attempts in flight admits no new attempt until enough have ended:
// "a Limiter admits an attempt while fewer than its limit are in flight".
// With hedges holding slots, an attempt takes a hedge's slot instead,
// and is admitted with InFlight above Limit.
func TestReview120PreemptionAdmitsAboveAFallenLimit(t *testing.T) {
	l := limit.NewAIMD(limit.Initial(10), limit.Backoff(0.5))
	var normal []limit.Ticket
	tk, err := l.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	normal = append(normal, tk)
	stopped := 0
	var extras []limit.Ticket
	for range 4 {
		tk, err := l.AcquireExtra(func() { stopped++ })
		if err != nil {
			t.Fatalf("extra: %v", err)
		}
		extras = append(extras, tk)
	}
	for range 5 {
		tk, err := l.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		normal = append(normal, tk)
	}
	l.Release(normal[0], errReview120Overload) // limit 10 -> 5, 9 in flight
	if l.Limit() != 5 || l.InFlight() != 9 {
		t.Fatalf("Limit %d InFlight %d, want 5 and 9", l.Limit(), l.InFlight())
	}
	_, err = l.Acquire(context.Background())
	if err == nil {
		t.Errorf("an attempt admitted with %d in flight over a limit of %d (a hedge stopped: %d)", l.InFlight(), l.Limit(), stopped)
	}
}

// Release of an extra Ticket whose slot another attempt waits for hands
// it on; the other attempt's Release gives it back. Waiters are served.
// The count never goes below 0 nor drifts. (Adapted to the wait for the
// stopped extra's slot that replaced the transfer review120 attacked.)
func TestReview120PreemptionCounts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := limit.NewFixed(4, limit.MaxWaiting(2))
		a, _ := l.Acquire(context.Background())
		stops := 0
		e1, err := l.AcquireExtra(func() { stops++ })
		if err != nil {
			t.Fatal(err)
		}
		b, _ := l.Acquire(context.Background())
		c, _ := l.Acquire(context.Background())
		// full: 4. The next stops e1 and waits for its slot.
		dc := make(chan limit.Ticket)
		go func() {
			tk, err := l.Acquire(context.Background())
			if err != nil {
				t.Error(err)
			}
			dc <- tk
		}()
		synctest.Wait()
		if stops != 1 || l.InFlight() != 4 {
			t.Fatalf("preempt: stops %d inflight %d", stops, l.InFlight())
		}
		l.Release(e1, nil)
		d := <-dc
		if l.InFlight() != 4 {
			t.Fatalf("extra's release gave back a slot: %d", l.InFlight())
		}
		// Now a waiter.
		got := make(chan limit.Ticket)
		go func() {
			tk, err := l.Acquire(context.Background())
			if err != nil {
				t.Error(err)
			}
			got <- tk
		}()
		synctest.Wait()
		if l.Waiting() != 1 {
			t.Fatalf("waiting %d", l.Waiting())
		}
		if _, err := l.AcquireExtra(func() {}); err == nil {
			t.Error("extra admitted with a waiter")
		}
		l.Release(d, nil)
		w := <-got
		for _, tk := range []limit.Ticket{a, b, c, w} {
			l.Release(tk, nil)
		}
		if l.InFlight() != 0 {
			t.Errorf("InFlight %d", l.InFlight())
		}
	})
}

// "With a ctx already done, it takes a free slot or refuses at once": an
// attempt whose caller is gone must not stop a hedge that another call
// still waits on, for a slot it will not use.
func TestReview120DoneCtxDoesNotStopAHedge(t *testing.T) {
	l := limit.NewFixed(4)
	a, _ := l.Acquire(context.Background())
	stops := 0
	e, err := l.AcquireExtra(func() { stops++ })
	if err != nil {
		t.Fatal(err)
	}
	b, _ := l.Acquire(context.Background())
	c, _ := l.Acquire(context.Background())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	tk, err := l.Acquire(ctx)
	if stops != 0 {
		t.Errorf("an Acquire with a done context stopped a hedge (err %v)", err)
	}
	l.Release(tk, context.Canceled)
	for _, x := range []limit.Ticket{a, e, b, c} {
		l.Release(x, nil)
	}
	if l.InFlight() != 0 {
		t.Errorf("InFlight %d", l.InFlight())
	}
}
