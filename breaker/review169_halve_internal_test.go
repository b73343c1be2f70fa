package breaker

// review169: FailureRate(ratio, minRequests) with minRequests above 2^31:
// the doc says it opens the breaker "when at least minRequests calls
// have ended in the window and the share of failures among them reaches
// ratio", and accepts any uint32. A closed window is halved at 2^31
// requests (halveAt), so it can never hold more than 2^31 ended calls.

import (
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/resilience"
)

func TestReview169FailureRateMinAboveHalving(t *testing.T) {
	for _, w := range []time.Duration{0, time.Hour} {
		for _, minReq := range []uint32{1<<31 - 100, 1 << 31, 1<<31 + 100, 1<<31 + 1<<19} {
			cfg := defaults()
			for _, o := range []Option{ConsecutiveFailures(0), FailureRate(1, minReq), Window(w, 1)} {
				o.apply(&cfg)
			}
			opened := false
			c := newCore(1, time.Second, cfg.window, cfg.buckets, func(n Counts) bool { return cfg.readyToTrip(n, true) },
				func(_, to resilience.State) { opened = opened || to == resilience.StateOpen })
			// Fast-forward: the window already holds 2^31 - 1000 failures
			// (as a dependency failing every call would have given it).
			const pre = 1<<31 - 1000
			c.win = Counts{Requests: pre, TotalFailures: pre, ConsecutiveFailures: pre}
			c.buckets[0] = c.win
			n := 0
			for ; n < 1<<20 && !opened; n++ {
				v, a := c.admit()
				if v != admitted {
					break
				}
				c.done(a, failed)
			}
			total := uint64(pre) + uint64(n)
			if !opened {
				t.Errorf("window %v, FailureRate(1, %d): %d failures in a row (every call failed) and still closed; counts %+v",
					w, minReq, total, c.win)
			} else {
				t.Logf("window %v, FailureRate(1, %d): opened after %d failures", w, minReq, total)
			}
		}
	}
}

// TestReview169ConsecutiveAboveHalving: ConsecutiveFailures(n) with n
// above 2^31 (no window): the run is kept whole through the halving,
// so it opens after n failures in a row.
func TestReview169ConsecutiveAboveHalving(t *testing.T) {
	for _, n := range []uint32{1<<31 + 100, 1<<31 + 1<<19} {
		cfg := defaults()
		for _, o := range []Option{ConsecutiveFailures(n), Window(0, 1)} {
			o.apply(&cfg)
		}
		opened := false
		c := newCore(1, time.Second, cfg.window, cfg.buckets, func(k Counts) bool { return cfg.readyToTrip(k, true) },
			func(_, to resilience.State) { opened = opened || to == resilience.StateOpen })
		const pre = 1<<31 - 1000
		c.win = Counts{Requests: pre, TotalFailures: pre, ConsecutiveFailures: pre}
		c.buckets[0] = c.win
		i := 0
		for ; i < 1<<20 && !opened; i++ {
			v, a := c.admit()
			if v != admitted {
				break
			}
			c.done(a, failed)
		}
		if total := uint64(pre) + uint64(i); !opened || total != uint64(n) {
			t.Errorf("ConsecutiveFailures(%d): opened %v after %d failures in a row", n, opened, total)
		}
	}
}
