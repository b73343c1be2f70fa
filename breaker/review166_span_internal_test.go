package breaker

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// review166Timed makes n calls answered at once, one after another, and
// returns how many of their answers the core timed.
func review166Timed(n int) int {
	b := New("r166")
	for range n {
		_ = b.Execute(context.Background(), func(context.Context) error { return nil })
	}
	timed := 0
	for _, sl := range b.cb.slow {
		timed += sl.timed
	}
	return timed
}

// TestReview166SamplingInABubble: a breaker times the first timeFirst
// answers of a span, then one in timeOneIn at random. In real time 400
// answers are about 16 + 384/16 = 40 timed. In a synctest bubble, where
// monotime readings are negative (the bubble's clock, 2000, is before the
// process's start), spanOf truncates toward zero, timeAnswer takes every
// answer for one "of a span before the current one", never draws a skip,
// and times all 400: the figures of examples/storm, in virtual time, run
// a breaker that behaves otherwise than in production.
func TestReview166SamplingInABubble(t *testing.T) {
	real := review166Timed(400)
	var virtual int
	synctest.Test(t, func(t *testing.T) {
		time.Sleep(time.Millisecond)
		virtual = review166Timed(400)
	})
	t.Logf("answers timed of 400: real time %d, in a bubble %d", real, virtual)
	if real > 100 {
		t.Fatalf("real time timed %d of 400: the sampling is not what this test assumes", real)
	}
	if virtual > 100 {
		t.Errorf("in a bubble, %d of 400 answers timed (real time: %d): the one-in-%d sampling is off", virtual, real, timeOneIn)
	}
}
