package breaker

import (
	"testing"
	"testing/synctest"
	"time"
)

// r167Answers makes n calls one after the other through c, each answered
// after took, one every gap.
func r167Answers(c *core, n int, took, gap time.Duration) {
	for range n {
		_, a := c.admit()
		time.Sleep(took)
		c.done(a, counted)
		time.Sleep(gap - took)
	}
}

// Promise (core, review166): the first 16 answers of each 10 s span are
// timed, then one in 16 at random (skip 0 to 30).
func TestReview167TimedShareEachSpan(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCore(1, time.Second, time.Minute, 6, func(Counts) bool { return false }, nil)
		r167CheckSpans(t, c, "made in the bubble")
	})
}

// The same for a core made outside the bubble and used inside (a
// package-level breaker in a synctest test).
func TestReview167TimedShareMadeOutsideBubble(t *testing.T) {
	c := newCore(1, time.Second, time.Minute, 6, func(Counts) bool { return false }, nil)
	synctest.Test(t, func(t *testing.T) {
		time.Sleep(time.Until(time.Now().Truncate(10 * time.Second).Add(10 * time.Second))) // a span edge of the bubble's clock, at least
		r167CheckSpans(t, c, "made outside the bubble")
	})
}

func r167CheckSpans(t *testing.T, c *core, what string) {
	t.Helper()
	for round := range 3 {
		// 1000 answers over 10 s (10 ms apart, 5 ms each): one or two
		// spans.
		_, a := c.admit()
		c.done(a, counted)
		c.mu.Lock()
		first := c.spanOf(a.at)
		c.mu.Unlock()
		r167Answers(c, 999, 5*time.Millisecond, 10*time.Millisecond)
		c.mu.Lock()
		timed := 0
		for _, sl := range c.slow {
			if sl.span == first || sl.span == first+1 {
				timed += sl.timed
			}
		}
		c.mu.Unlock()
		// At most 16 first in each of two spans, then one in 16 of the
		// rest: about 94 at most; far fewer than 1000.
		if timed < timeFirst || timed > 2*timeFirst+2*1000/timeOneIn {
			t.Errorf("%s, round %d: %d of 1000 answers timed; want 16 first in a span, then about one in 16", what, round, timed)
		}
		time.Sleep(time.Duration(round+1) * 3 * time.Minute) // idle gap
	}
}
