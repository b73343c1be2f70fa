package limit_test

import (
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
)

// r38Stale runs a bulkhead of 10. First the dependency hangs for 5 s
// while three callers without a deadline wait (a slot freed just before
// the hang gives one to the first); it recovers, the queue empties, and
// nothing queues for an hour. Then, healthy (10 ms +- 2 ms, 1,000 a
// second), a burst of 30 calls and a stream at its capacity for 2 s, each
// call with a 500 ms budget: first come first served, none waits more
// than about 40 ms. It returns the outcomes of the burst and stream.
func r38Stale(t *testing.T) (ok, failed int64) {
	var st r38Stats
	synctest.Test(t, func(t *testing.T) {
		l := r38Fixed(10, 1<<20)
		// The hang.
		var g sync.WaitGroup
		hang := func(time.Time) time.Duration { return 5 * time.Second }
		quick := func(time.Time) time.Duration { return time.Millisecond }
		g.Go(func() { r38Call(l, &st, 0, quick) })
		for range 9 {
			g.Go(func() { r38Call(l, &st, 0, hang) })
		}
		synctest.Wait()
		g.Go(func() { r38Call(l, &st, 0, hang) })
		synctest.Wait()
		for range 2 {
			g.Go(func() { r38Call(l, &st, 0, quick) })
		}
		g.Wait()
		time.Sleep(time.Hour)
		st = r38Stats{}

		// The healthy burst and stream.
		var mu sync.Mutex
		rng := rand.New(rand.NewPCG(1, 38))
		serve := func(time.Time) time.Duration {
			mu.Lock()
			defer mu.Unlock()
			return 8*time.Millisecond + time.Duration(rng.Int64N(int64(4*time.Millisecond)))
		}
		for range 30 {
			g.Go(func() { r38Call(l, &st, 500*time.Millisecond, serve) })
		}
		start := time.Now()
		for i := 1; i <= 2000; i++ {
			time.Sleep(start.Add(time.Duration(i) * time.Second / 1000).Sub(time.Now()))
			g.Go(func() { r38Call(l, &st, 500*time.Millisecond, serve) })
		}
		g.Wait()
	})
	return st.ok.Load(), st.failed()
}

// TestReview38AHangAnHourAgoStillSkipsWaiters holds the Limiter to
// failing at most 5 calls of r38Stale: what it learned of the dependency
// during a hang an hour ago must not judge the next queue's waiters late.
// The former rule (adaptive LIFO) failed 0 here; the Little's-law
// estimate of review 38, which kept the answer time estimated during the
// hang, failed 21.
func TestReview38AHangAnHourAgoStillSkipsWaiters(t *testing.T) {
	const formerFailed = 0
	ok, failed := r38Stale(t)
	t.Logf("%d ok, %d failed (the former rule: %d failed)", ok, failed, formerFailed)
	assert.LessOrEqual(t, failed, int64(formerFailed+5), "the queue order fails calls the former one served in time")
}
