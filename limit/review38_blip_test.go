package limit_test

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
)

// r38Blip runs a bulkhead of 50 in front of a dependency answering in
// 50 ms (1,000 a second), a standing queue of 100 (100 ms) fed at exactly
// that rate by calls with a 1 s budget, and one blip: nothing answers for
// 200 ms. First come first served, the queue then stands at 300 ms, well
// within every budget: each call can be answered in time.
func r38Blip(t *testing.T) (ok, failed int64) {
	const n, blip = 50, 200 * time.Millisecond
	var s r38Stats
	synctest.Test(t, func(t *testing.T) {
		l := r38Fixed(n, 1<<20)
		start := time.Now()
		blipFrom, blipTo := start.Add(500*time.Millisecond), start.Add(500*time.Millisecond+blip)
		serve := func(sent time.Time) time.Duration {
			end := sent.Add(time.Duration(n) * time.Millisecond)
			if !end.Before(blipFrom) && end.Before(blipTo) {
				end = blipTo
			}
			return end.Sub(sent)
		}
		var g sync.WaitGroup
		for range n + 2*n { // n in flight, 2n queued
			g.Go(func() { r38Call(l, &s, time.Second, serve) })
		}
		for range 2000 {
			time.Sleep(time.Millisecond)
			g.Go(func() { r38Call(l, &s, time.Second, serve) })
		}
		g.Wait()
	})
	return s.ok.Load(), s.failed()
}

// TestReview38BlipInAStandingQueue holds the Limiter to failing at most
// 10 of the calls of r38Blip: the former rule (adaptive LIFO) failed 0
// here; the Little's-law estimate of review 38 failed 300, the blip
// making it judge waiters late that had time to spare.
func TestReview38BlipInAStandingQueue(t *testing.T) {
	const formerFailed = 0
	ok, failed := r38Blip(t)
	t.Logf("%d ok, %d failed (the former rule: %d failed)", ok, failed, formerFailed)
	assert.LessOrEqual(t, failed, int64(formerFailed+10), "the queue order fails calls the former one served in time")
}
