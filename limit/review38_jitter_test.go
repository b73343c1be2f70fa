package limit_test

import (
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
)

// r38Jitter runs a bulkhead of n in front of a dependency answering in
// s +- s/5 (uniform), fed by a burst of q calls then a stream at rate
// (calls a second) for 2 s, each with budget; the dependency stalls for
// blip at 500 ms (nothing answers meanwhile). It runs in virtual time.
func r38Jitter(t *testing.T, n, q int, s time.Duration, rate float64, budget, blip time.Duration, seed uint64) (ok, failed int64) {
	return r38JitterIn(t, synctest.Test, n, q, s, rate, budget, blip, seed)
}

// r38RealTime runs f on the machine's clock.
func r38RealTime(t *testing.T, f func(*testing.T)) { f(t) }

// r38JitterIn is r38Jitter run by in: synctest.Test or r38RealTime.
func r38JitterIn(t *testing.T, in func(*testing.T, func(*testing.T)), n, q int, s time.Duration, rate float64, budget, blip time.Duration, seed uint64) (ok, failed int64) {
	var st r38Stats
	in(t, func(t *testing.T) {
		l := r38Fixed(n, 1<<20)
		start := time.Now()
		blipFrom, blipTo := start.Add(500*time.Millisecond), start.Add(500*time.Millisecond+blip)
		var mu sync.Mutex
		rng := rand.New(rand.NewPCG(seed, 38))
		serve := func(sent time.Time) time.Duration {
			mu.Lock()
			d := s - s/5 + time.Duration(rng.Int64N(int64(2*s/5)+1))
			mu.Unlock()
			end := sent.Add(d)
			if !end.Before(blipFrom) && end.Before(blipTo) {
				end = blipTo
			}
			return end.Sub(sent)
		}
		var g sync.WaitGroup
		for range q {
			g.Go(func() { r38Call(l, &st, budget, serve) })
		}
		gap := time.Duration(float64(time.Second) / rate)
		for i := 1; time.Duration(i)*gap <= 2*time.Second; i++ {
			time.Sleep(start.Add(time.Duration(i) * gap).Sub(time.Now()))
			g.Go(func() { r38Call(l, &st, budget, serve) })
		}
		g.Wait()
	})
	return st.ok.Load(), st.failed()
}

// TestReview38BurstThenStreamRealTime runs, on the machine's clock, a
// bulkhead of 100 in front of a dependency answering in 40 to 60 ms (2,000
// a second), a burst of 300 calls then a stream at 90% of its capacity
// for 2 s, each call with a 1 s budget: first come first served, no call
// waits more than about 150 ms. It holds the Limiter to failing at most
// 10 of them: the former rule (adaptive LIFO) failed 0 here, and so did
// the Little's-law estimate of review 38.
func TestReview38BurstThenStreamRealTime(t *testing.T) {
	const formerFailed = 0
	ok, failed := r38JitterIn(t, r38RealTime, 100, 300, 50*time.Millisecond, 1800, time.Second, 0, 1)
	t.Logf("%d ok, %d failed (the former rule: %d failed)", ok, failed, formerFailed)
	assert.LessOrEqual(t, failed, int64(formerFailed+10), "the queue order fails calls the former one served in time")
}

// TestReview38BurstThenStream is TestReview38BurstThenStreamRealTime in
// virtual time, with the same bound: the former rule (adaptive LIFO)
// failed 0 here, and so did the Little's-law estimate of review 38.
func TestReview38BurstThenStream(t *testing.T) {
	const formerFailed = 0
	ok, failed := r38Jitter(t, 100, 300, 50*time.Millisecond, 1800, time.Second, 0, 1)
	t.Logf("%d ok, %d failed (the former rule: %d failed)", ok, failed, formerFailed)
	assert.LessOrEqual(t, failed, int64(formerFailed+10), "the queue order fails calls the former one served in time")
}

// TestReview38StallInAStandingQueueRealTime runs, on the machine's clock,
// a bulkhead of 50 in front of a dependency answering in 40 to 60 ms
// (1,000 a second), a burst of 150 then a stream at 97% of that for 2 s,
// each call with a 1 s budget; at 500 ms the dependency stalls for
// 200 ms. First come first served, the queue peaks near 350 ms: every
// call can be answered in time. It holds the Limiter to failing at most
// 10 of them: the former rule (adaptive LIFO) failed 0 here; the
// Little's-law estimate of review 38 failed 262.
func TestReview38StallInAStandingQueueRealTime(t *testing.T) {
	const formerFailed = 0
	ok, failed := r38JitterIn(t, r38RealTime, 50, 150, 50*time.Millisecond, 970, time.Second, 200*time.Millisecond, 1)
	t.Logf("%d ok, %d failed (the former rule: %d failed)", ok, failed, formerFailed)
	assert.LessOrEqual(t, failed, int64(formerFailed+10), "the queue order fails calls the former one served in time")
}

// TestReview38StallInAStandingQueue is
// TestReview38StallInAStandingQueueRealTime in virtual time, with the
// same bound: the former rule (adaptive LIFO) failed 0 here; the
// Little's-law estimate of review 38 failed 256.
func TestReview38StallInAStandingQueue(t *testing.T) {
	const formerFailed = 0
	ok, failed := r38Jitter(t, 50, 150, 50*time.Millisecond, 970, time.Second, 200*time.Millisecond, 1)
	t.Logf("%d ok, %d failed (the former rule: %d failed)", ok, failed, formerFailed)
	assert.LessOrEqual(t, failed, int64(formerFailed+10), "the queue order fails calls the former one served in time")
}
