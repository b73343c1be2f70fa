package limit

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// An overloaded dependency that sheds most attempts with a fast 503
// (1 ms) and answers the others in 400 ms, through a bulkhead of 4 with
// callers of a 1 s budget at 1.5 and 2 times its capacity: only the slow
// answers are successes. The answer time takes in successes only, so the
// fast failures do not make the dependency seem fast, and OldestOnTime
// completes at least 90% of the calls that the former order (newest first
// once the oldest is late) completed; the default order, which is the
// former order, completes exactly as many.
func TestReview39FastFailuresCostOldestOnTimeLittle(t *testing.T) {
	for _, c := range []struct {
		util   float64
		former int // successes of the former order, of 276 that could succeed
	}{
		{1.5, 179}, // former 179, OldestOnTime 175
		{2, 133},   // former 133, OldestOnTime 124
	} {
		rng := rand.New(rand.NewPCG(5, 6))
		fast, slow, p := time.Millisecond, 400*time.Millisecond, 0.1
		n := 4
		rate := c.util * float64(n) / ((1-p)*float64(fast) + p*float64(slow))
		var calls []r39Call
		at := time.Duration(0)
		slowN := 0
		for range 3000 {
			cl := r39Call{budget: time.Second, service: fast, fails: true}
			if rng.Float64() < p {
				cl.service, cl.fails = slow, false
				slowN++
			}
			at += time.Duration(rng.ExpFloat64() / rate)
			cl.at = at
			calls = append(calls, cl)
		}
		successes := func(res r39Result) int {
			ok := slowN
			for _, i := range res.failedIdx {
				if !calls[i].fails {
					ok--
				}
			}
			return ok
		}
		def := successes(r39Sim(t, func() *Limiter { return NewFixed(n, MaxWaiting(100000)) }, calls))
		oot := successes(r39Sim(t, func() *Limiter { return NewFixed(n, MaxWaiting(100000), OldestOnTime()) }, calls))
		t.Logf("utilisation %v: successes: default %d, OldestOnTime %d, former %d (of %d that could succeed)", c.util, def, oot, c.former, slowN)
		assert.Equal(t, c.former, def, "utilisation %v: the default order is the former order", c.util)
		assert.GreaterOrEqual(t, oot*10, c.former*9, "utilisation %v: OldestOnTime: %d successes, under 90%% of the former order's %d", c.util, oot, c.former)
	}
}
