package breaker_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// r167Call runs one call through b that its dependency answers after
// took, or hangs on (took < 0), with a deadline of deadline.
func r167Call(b *breaker.Breaker, took, deadline time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	return b.Execute(ctx, func(ctx context.Context) error {
		if took < 0 {
			<-ctx.Done()
			return ctx.Err()
		}
		select {
		case <-time.After(took):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
}

// r167HangOpens: within a bubble, a dependency that hangs, called with
// 300 ms deadlines one after the other for 100 s, must open b: no answer
// came in that time, so none is "recent", and 300 ms > minAnswer.
func r167HangOpens(t *testing.T, b *breaker.Breaker, what string) {
	t.Helper()
	start := time.Now()
	for time.Since(start) < 100*time.Second {
		_ = r167Call(b, -1, 300*time.Millisecond)
		if b.State() == resilience.StateOpen {
			return
		}
		time.Sleep(700 * time.Millisecond)
	}
	t.Errorf("%s: a dependency that hung for 100 s (no answer) never opened the breaker; counts %+v", what, b.Counts())
}

// Promise (core.cutShort): a deadline failure is excused only by the
// slowest *recent* answer (the last 8 spans of 10 s). A breaker made and
// used outside a bubble, then used inside one: its old slow answer must
// not excuse failures inside for ever.
func TestReview167BreakerOutsideThenBubbleStaleSlowest(t *testing.T) {
	b := breaker.New("r167-outside")
	// Outside, in real time: one healthy answer of 400 ms.
	if err := r167Call(b, 400*time.Millisecond, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	synctest.Test(t, func(t *testing.T) {
		r167HangOpens(t, b, "made and used outside, then used in a bubble")
	})
}

// Two bubbles in a row (two synctest tests sharing a breaker): each
// bubble's clock starts at the same instant, so the second's readings
// are behind the first's.
func TestReview167BreakerTwoBubblesStaleSlowest(t *testing.T) {
	b := breaker.New("r167-two")
	synctest.Test(t, func(t *testing.T) {
		// 3 minutes of slow-but-healthy answers (1 s), long deadlines.
		for range 180 {
			if err := r167Call(b, time.Second, 5*time.Second); err != nil {
				t.Fatal(err)
			}
		}
	})
	synctest.Test(t, func(t *testing.T) {
		r167HangOpens(t, b, "second bubble after a first of 1 s answers")
	})
}

// Made inside a bubble, the breaker is then used outside in real time:
// the real readings are far "after" the bubble's. A hanging dependency
// must still open it (the short real-time form: 300 ms deadlines, first
// answer never comes). Bounded to ~3 s of real time.
func TestReview167BreakerBubbleThenOutside(t *testing.T) {
	var b *breaker.Breaker
	synctest.Test(t, func(t *testing.T) {
		b = breaker.New("r167-inside")
		for range 20 {
			if err := r167Call(b, 2*time.Second, 5*time.Second); err != nil {
				t.Fatal(err)
			}
		}
	})
	// Outside: hanging calls, 150 ms deadlines (> minAnswer, < the
	// bubble's 2 s answers, which were minutes-of-fake-time and 27
	// years of wall clock ago).
	start := time.Now()
	for time.Since(start) < 3*time.Second {
		_ = r167Call(b, -1, 150*time.Millisecond)
		if b.State() == resilience.StateOpen {
			return
		}
	}
	t.Errorf("used outside after a bubble: a hanging dependency never opened it in 3 s; counts %+v", b.Counts())
}

// Promise: a healthy dependency whose answers are slow but steady (300
// ms) keeps short-deadline callers (200 ms, less than the slowest recent
// answer) from opening the breaker, across span edges, with long idle
// gaps, and many goroutines; after each gap a long-deadline caller
// leads, so that an answer is in before the short ones end.
func TestReview167BreakerSlowHealthyManyGoroutinesGaps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("r167-healthy")
		var opened atomic.Int32
		for round := range 6 {
			// Warm: one long call answered, so there is a recent answer.
			if err := r167Call(b, 300*time.Millisecond, 2*time.Second); err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			for g := range 40 {
				wg.Go(func() {
					for i := range 60 {
						d := 2 * time.Second
						if (g+i)%2 == 0 {
							d = 200 * time.Millisecond
						}
						_ = r167Call(b, 300*time.Millisecond, d)
						time.Sleep(time.Duration(37*g%250) * time.Millisecond)
						if b.State() != resilience.StateClosed {
							opened.Add(1)
						}
					}
				})
			}
			wg.Wait()
			time.Sleep(time.Duration(round+1) * 97 * time.Second) // idle gaps up to ~10 minutes, off the span grid
		}
		if opened.Load() > 0 {
			t.Errorf("a healthy 300 ms dependency's breaker was seen not closed %d times by 200 ms callers", opened.Load())
		}
	})
}
