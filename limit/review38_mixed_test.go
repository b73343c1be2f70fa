package limit_test

import (
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
)

// r38Mixed runs a bulkhead of n in front of a dependency answering in s
// +- 10%, with Poisson arrivals for 5 s: long-budget callers at rateLong,
// short-budget ones at rateShort. It returns the short callers' successes
// and failures, and the long ones' failures.
func r38Mixed(t *testing.T, n int, s time.Duration, rateLong, rateShort float64, long, short time.Duration, seed uint64) (okShort, failShort, failLong int64) {
	var stS, stL r38Stats
	synctest.Test(t, func(t *testing.T) {
		l := r38Fixed(n, 1<<20)
		var mu sync.Mutex
		rng := rand.New(rand.NewPCG(seed, 38))
		serve := func(time.Time) time.Duration {
			mu.Lock()
			defer mu.Unlock()
			return s - s/10 + time.Duration(rng.Int64N(int64(s/5)+1))
		}
		var g sync.WaitGroup
		start := time.Now()
		var wg sync.WaitGroup
		for i, c := range []struct {
			rate   float64
			budget time.Duration
			st     *r38Stats
		}{{rateLong, long, &stL}, {rateShort, short, &stS}} {
			arrivals := rand.New(rand.NewPCG(seed, uint64(100+i))) // apart from the service times: the same arrivals whatever the order of service
			next := func(rate float64) time.Duration {
				return time.Duration(arrivals.ExpFloat64() / rate * float64(time.Second))
			}
			wg.Go(func() {
				at := next(c.rate)
				for at < 5*time.Second {
					time.Sleep(start.Add(at).Sub(time.Now()))
					g.Go(func() { r38Call(l, c.st, c.budget, serve) })
					at += next(c.rate)
				}
			})
		}
		wg.Wait()
		g.Wait()
	})
	return stS.ok.Load(), stS.failed(), stL.failed()
}

// TestReview38ShortBudgetsStarvedByLongOnes runs a bulkhead of 20 in
// front of a dependency answering in 45 to 55 ms (400 a second), with
// Poisson arrivals at 97% of that for 5 s (three seeds): 90% of the
// callers with a 5 s budget, 10% with 150 ms, three times the answer
// time. It holds the Limiter to failing at most 39 of the short callers,
// half as many again as the former rule (adaptive LIFO), which failed 23
// here, plus 5. The Little's-law estimate of review 38 failed 70: the
// short callers that waited more than 50 ms had less than twice the
// answer time left, were judged late and went behind every long caller,
// who had seconds to spare.
func TestReview38ShortBudgetsStarvedByLongOnes(t *testing.T) {
	const formerFailed = 23
	var failed, longFailed int64
	for seed := uint64(1); seed <= 3; seed++ {
		_, f, lf := r38Mixed(t, 20, 50*time.Millisecond, 388*0.9, 388*0.1, 5*time.Second, 150*time.Millisecond, seed)
		failed += f
		longFailed += lf
	}
	t.Logf("short callers failed: %d (the former rule: %d); long callers failed: %d", failed, formerFailed, longFailed)
	assert.LessOrEqual(t, failed, int64(formerFailed*3/2+5), "short-budget callers that could be answered are skipped for long-budget ones")
}

// r38Jump runs a bulkhead of n in front of a dependency answering in from
// (+-10%) until 1 s, then in to; arrivals at rate for 3 s with budget.
func r38Jump(t *testing.T, n int, from, to time.Duration, rate float64, budget time.Duration) (ok, failed int64) {
	var st r38Stats
	synctest.Test(t, func(t *testing.T) {
		l := r38Fixed(n, 1<<20)
		start := time.Now()
		var mu sync.Mutex
		rng := rand.New(rand.NewPCG(7, 38))
		serve := func(sent time.Time) time.Duration {
			s := from
			if sent.Sub(start) >= time.Second {
				s = to
			}
			mu.Lock()
			defer mu.Unlock()
			return s - s/10 + time.Duration(rng.Int64N(int64(s/5)+1))
		}
		var g sync.WaitGroup
		for i := 1; time.Duration(float64(i)/rate*float64(time.Second)) < 3*time.Second; i++ {
			time.Sleep(start.Add(time.Duration(float64(i) / rate * float64(time.Second))).Sub(time.Now()))
			g.Go(func() { r38Call(l, &st, budget, serve) })
		}
		g.Wait()
	})
	return st.ok.Load(), st.failed()
}

// TestReview38LatencyJumps runs a bulkhead of 20 whose dependency's
// answer time jumps at 1 s, up or down, under loads it can and cannot
// serve, each call with a 1 s budget, and holds the Limiter in each case
// to failing at most 10 calls more than the former rule (adaptive LIFO)
// failed: formerFailed below. The Little's-law estimate of review 38
// failed 0, 38, 0, 590 and 11.
func TestReview38LatencyJumps(t *testing.T) {
	for _, c := range []struct {
		from, to     time.Duration
		rate         float64
		formerFailed int64
	}{
		{20 * time.Millisecond, 200 * time.Millisecond, 90, 0},
		{20 * time.Millisecond, 200 * time.Millisecond, 150, 32}, // past the 100 a second it can serve after the jump
		{200 * time.Millisecond, 20 * time.Millisecond, 150, 0},
		{200 * time.Millisecond, 20 * time.Millisecond, 900, 740}, // past the 100 a second it can serve before the jump
		{20 * time.Millisecond, 400 * time.Millisecond, 60, 0},
	} {
		ok, failed := r38Jump(t, 20, c.from, c.to, c.rate, time.Second)
		t.Logf("%v -> %v at %v/s: %d ok, %d failed (the former rule: %d failed)", c.from, c.to, c.rate, ok, failed, c.formerFailed)
		assert.LessOrEqual(t, failed, c.formerFailed+10, "%v -> %v at %v/s: the queue order fails calls the former one served in time", c.from, c.to, c.rate)
	}
}
