package limit

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// r39Orders are the two orders of the queue, default first.
var r39Orders = []struct {
	name string
	opts []Option
}{
	{"default", nil},
	{"OldestOnTime", []Option{OldestOnTime()}},
}

// r39LongBeforeShort is a bulkhead of one, shared by reports (budget
// report, 0: none; answered in 300 ms) and lookups (budget 500 ms,
// answered in 10 ms). R0 takes the slot; R1 waits, and is answered in
// 300 ms; the lookups L1 to L5 arrive as R1 is sent, R2 after them.
func r39LongBeforeShort(report time.Duration) []r39Call {
	ms := time.Millisecond
	calls := []r39Call{
		{at: 0, budget: report, service: 300 * ms},       // R0
		{at: 10 * ms, budget: report, service: 300 * ms}, // R1
	}
	for i := range 5 { // L1..L5
		calls = append(calls, r39Call{at: time.Duration(350+10*i) * ms, budget: 500 * ms, service: 10 * ms})
	}
	return append(calls, r39Call{at: 400 * ms, budget: report, service: 300 * ms}) // R2
}

// The review found that when R1's answer frees the slot, the lookups have
// 250 ms left, less than the answer time (300 ms), and OldestOnTime then
// gave the slot to R2 before them: all five failed. OldestOnTime now looks
// at the answer time only once the oldest waiter is late (a quarter of its
// wait left, and L1 has waited 250 ms of its 500): the lookups are served
// first come first served, and all eight calls complete, in either order.
func TestReview39ALongCallsAnswerTimeFailsShortCalls(t *testing.T) {
	calls := r39LongBeforeShort(10 * time.Second)
	for _, o := range r39Orders {
		res := r39Sim(t, func() *Limiter { return NewFixed(1, append([]Option{MaxWaiting(100)}, o.opts...)...) }, calls)
		assert.Equal(t, len(calls), res.ok, "%s: calls failed: %v", o.name, res.failedIdx)
	}
}

// The same with reports that have no deadline (background work).
func TestReview39ANoDeadlineCallsAnswerTimeFailsShortCalls(t *testing.T) {
	calls := r39LongBeforeShort(0)
	for _, o := range r39Orders {
		res := r39Sim(t, func() *Limiter { return NewFixed(1, append([]Option{MaxWaiting(100)}, o.opts...)...) }, calls)
		assert.Equal(t, len(calls), res.ok, "%s: calls failed: %v", o.name, res.failedIdx)
	}
}

// Calls of very different lengths on one Limiter: 3000 calls, 5% reports
// (budget 10 s, answered in 1 s), 95% lookups (budget 500 ms, answered in
// 20 ms), through a bulkhead of 5 at 70% to 90% of its capacity. The
// reports' answer time takes lookups for late, and OldestOnTime serves
// reports before them: at 90% it completes 5% fewer calls than the former
// order (newest first once the oldest is late), its documented cost, and
// it must complete at least 90% as many. The default order, which is the
// former order, must get exactly the former figures.
func TestReview39MixedLengthsCostOldestOnTimeLittle(t *testing.T) {
	for _, c := range []struct {
		util                  float64
		ok, limited, timedOut int // the former order's
	}{
		{0.7, 2828, 169, 3}, // successes: former 2828, OldestOnTime 2870
		{0.8, 2586, 413, 1}, // former 2586, OldestOnTime 2601
		{0.9, 2251, 748, 1}, // former 2251, OldestOnTime 2142
	} {
		rng := rand.New(rand.NewPCG(3, 4))
		fast, slow, pr := 20*time.Millisecond, time.Second, 0.05
		n := 5
		rate := c.util * float64(n) / ((1-pr)*float64(fast) + pr*float64(slow))
		var calls []r39Call
		at := time.Duration(0)
		for range 3000 {
			cl := r39Call{budget: 500 * time.Millisecond, service: fast}
			if rng.Float64() < pr {
				cl = r39Call{budget: 10 * time.Second, service: slow}
			}
			at += time.Duration(rng.ExpFloat64() / rate)
			cl.at = at
			calls = append(calls, cl)
		}
		def := r39Sim(t, func() *Limiter { return NewFixed(n, MaxWaiting(100000)) }, calls)
		oot := r39Sim(t, func() *Limiter { return NewFixed(n, MaxWaiting(100000), OldestOnTime()) }, calls)
		t.Logf("utilisation %v: ok/limited/timed out: default %d/%d/%d, OldestOnTime %d/%d/%d, former %d/%d/%d (of %d)", c.util,
			def.ok, def.limited, def.timedOut, oot.ok, oot.limited, oot.timedOut, c.ok, c.limited, c.timedOut, len(calls))
		assert.Equal(t, [3]int{c.ok, c.limited, c.timedOut}, [3]int{def.ok, def.limited, def.timedOut},
			"utilisation %v: the default order is the former order (ok, limited, timed out)", c.util)
		assert.GreaterOrEqual(t, oot.ok*10, c.ok*9, "utilisation %v: OldestOnTime: %d calls completed, under 90%% of the former order's %d", c.util, oot.ok, c.ok)
	}
}
