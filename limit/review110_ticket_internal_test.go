package limit

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

var review110Fail = errors.New("503") // transient: a failure

// Across the wrap of the round's 31 bits, a failure of an attempt sent in
// the current round decreases the limit once, a stale one does not, and
// no ticket reads as queued unless it waited.
func TestReview110RoundWrap(t *testing.T) {
	for _, start := range []uint64{1<<31 - 2, 1<<31 - 1, 1 << 31, 1<<32 - 1, 1 << 32, 1<<63 - 1} {
		l := NewAIMD(Initial(100), Min(1), Max(1000), Backoff(0.5))
		l.round = start
		for i := range 4 {
			tk, err := l.Acquire(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if tk.Queued() {
				t.Fatalf("round %d: a ticket granted at once reads as queued: %#x", l.round, uint64(tk))
			}
			stale, _ := l.Acquire(context.Background())
			before := l.Limit()
			l.Release(tk, review110Fail)
			if got := l.Limit(); got >= before {
				t.Fatalf("start %d step %d: a failure in the current round did not decrease the limit (%d -> %d)", start, i, before, got)
			}
			mid := l.Limit()
			l.Release(stale, review110Fail)
			if got := l.Limit(); got != mid {
				t.Fatalf("start %d step %d: a failure of the round before decreased the limit again (%d -> %d)", start, i, mid, got)
			}
			l.limit = 100
		}
	}
}

// A queued ticket (granted from the queue), timed or not, reads as
// queued; its round is still learned from.
func TestReview110QueuedTicketLearns(t *testing.T) {
	for _, oot := range []bool{false, true} {
		opts := []Option{Initial(1), Min(1), Max(10), MaxWaiting(5), Backoff(0.5)}
		if oot {
			opts = append(opts, OldestOnTime())
		}
		l := NewAIMD(opts...)
		l.round = 1<<31 - 1
		first, _ := l.Acquire(context.Background())
		got := make(chan Ticket)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
			defer cancel()
			tk, err := l.Acquire(ctx)
			if err != nil {
				t.Error(err)
			}
			got <- tk
		}()
		for l.Waiting() == 0 {
			time.Sleep(time.Millisecond)
		}
		l.Release(first, nil)
		tk := <-got
		if !tk.Queued() {
			t.Fatalf("oot=%v: a ticket granted from the queue does not read as queued: %#x", oot, uint64(tk))
		}
		if oot != (tk&timed != 0) {
			t.Fatalf("oot=%v: timed bit %#x", oot, uint64(tk))
		}
		l.limit = 8
		l.Release(tk, review110Fail)
		if l.Limit() != 4 {
			t.Fatalf("oot=%v: a queued ticket's failure in the current round did not decrease the limit: %d", oot, l.Limit())
		}
		if l.round != 1<<31 {
			t.Fatalf("round %d", l.round)
		}
		e := l.Enter()
		if e.Queued() || e == 0 {
			t.Fatalf("Enter's ticket %#x", uint64(e))
		}
		l.Release(e, nil)
		l.Release(0, review110Fail)
		if l.InFlight() != 0 {
			t.Fatalf("in flight %d", l.InFlight())
		}
	}
}

// Concurrent acquire/release/enter with failures, double releases and
// zero tickets: the in-flight count never goes negative or leaks, and
// the limit stays within [Min, Max]; run under -race.
func TestReview110TicketStress(t *testing.T) {
	l := NewAIMD(Initial(4), Min(2), Max(50), MaxWaiting(64), OldestOnTime())
	l.round = 1<<31 - 3
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				var tk Ticket
				if (g+i)%7 == 0 {
					tk = l.Enter()
				} else {
					ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
					var err error
					tk, err = l.Acquire(ctx)
					cancel()
					if err != nil {
						continue
					}
				}
				var err error
				if i%3 == 0 {
					err = review110Fail
				}
				l.Release(tk, err)
				if i%101 == 0 {
					l.Release(0, err)
				}
			}
		}()
	}
	wg.Wait()
	if n := l.InFlight(); n != 0 {
		t.Errorf("in flight after all released: %d", n)
	}
	if lim := l.Limit(); lim < 2 || lim > 50 {
		t.Errorf("limit %d out of [2, 50]", lim)
	}
	if l.Waiting() != 0 {
		t.Errorf("waiting %d", l.Waiting())
	}
}
