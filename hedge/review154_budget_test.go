package hedge

import (
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// budgetBound is the most hedges the doc allows in a window of calls:
// fewer than share*calls+1 before each, so ceil(share*calls+1) at most.
func budgetBound(share float64, calls int) int {
	return int(math.Ceil(share*float64(calls) + 1))
}

// review154: "the bound holds over each window of ten whole seconds". A
// busy second with no hedges wanted, then a slow second 9 s later: the
// hedges of the slow second are judged against the busy second's calls,
// and the aligned window [1 s, 11 s), which holds none of the busy calls,
// sees one hedge per call. The doc's carve-out ("up to twice that") does
// not cover it either.
func TestReview154LullCarriesBudgetIntoAlignedWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := New() // 10%
		for range 1000 {
			p.Called() // bucket 0: busy, fast, nothing to hedge
		}
		time.Sleep(9*time.Second + 500*time.Millisecond) // bucket 9
		calls, hedges := 0, 0
		for range 100 {
			p.Called()
			calls++
			if p.Take() {
				hedges++
			}
		}
		time.Sleep(time.Second) // bucket 10: the window [1 s, 11 s) is over
		// The aligned window of buckets 1..10 holds 100 calls and hedges.
		bound := budgetBound(0.1, calls)
		t.Logf("window [1s,11s): %d calls, %d hedges; bound %d, twice %d", calls, hedges, bound, 2*bound)
		if hedges > bound { // the bound over every span of whole seconds (hedge's doc, after the fix)
			t.Errorf("aligned 10 s window [1s,11s): %d hedges for %d calls, more than MaxShare(0.1)*calls+1 = %d",
				hedges, calls, bound)
		}
	})
}

// Many goroutines, one bucket: Take never lets more through than the
// budget, whatever the interleaving.
func TestReview154ConcurrentTakeExact(t *testing.T) {
	for _, share := range []float64{0.1, 0.5, 1, math.SmallestNonzeroFloat64} {
		synctest.Test(t, func(t *testing.T) {
			p := New(MaxShare(share))
			const calls = 200
			for range calls {
				p.Called()
			}
			var got atomic.Int64
			var wg sync.WaitGroup
			for range 64 {
				wg.Go(func() {
					for range 20 {
						if p.Take() {
							got.Add(1)
						}
					}
				})
			}
			wg.Wait()
			if n, want := int(got.Load()), budgetBound(share, calls); n != want {
				t.Errorf("share %v: %d hedges taken for %d calls, want exactly %d", share, n, calls, want)
			}
		})
	}
}

// Steady traffic with goroutines calling and hedging at once, time going
// forward in steps that skip buckets: every aligned window holds no more
// hedges than its share plus one (rounded up), and one more for a budget
// carried from the bucket that just left it. Traffic is steady (the same
// calls each second), so no lull carries a busy second's budget.
func TestReview154SteadyAlignedWindows(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := New(MaxShare(0.2))
		start := time.Now()
		const seconds = 40
		var mu sync.Mutex
		calls := make([]int, seconds+12)
		hedges := make([]int, seconds+12)
		bucket := func() int { return int(time.Since(start) / time.Second) }
		var wg sync.WaitGroup
		for g := range 16 {
			wg.Go(func() {
				for step := range seconds * 10 {
					time.Sleep(100 * time.Millisecond)
					if (step+g)%3 == 0 {
						continue
					}
					p.Called()
					b := bucket()
					ok := p.Take()
					mu.Lock()
					calls[b]++
					if ok {
						hedges[b]++
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		for end := 9; end < seconds; end++ {
			c, h := 0, 0
			for b := end - 9; b <= end; b++ {
				c += calls[b]
				h += hedges[b]
			}
			// Steady traffic: the bucket leaving the window had as many
			// calls as the one coming in, so the carried budget is at most
			// the hedges of one bucket's share.
			if bound := budgetBound(0.2, c) + budgetBound(0.2, calls[end]); h > bound {
				t.Errorf("window ending at %ds: %d hedges for %d calls, bound %d", end, h, c, bound)
			}
		}
	})
}

// The clock jumps far forward (beyond 2^32 buckets would take 136 years;
// here a day and a window): an old window's counts are gone and the
// budget is the new window's.
func TestReview154ClockJump(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := New()
		for range 1000 {
			p.Called()
		}
		time.Sleep(24*time.Hour + 10*time.Second)
		p.Called()
		n := 0
		for p.Take() {
			n++
			if n > 100 {
				break
			}
		}
		if want := budgetBound(0.1, 1); n != want {
			t.Errorf("after a day's jump, a lone call got %d hedges, want %d", n, want)
		}
	})
}

// Quantile: a dependency that slows down, then speeds up. The delay
// follows within the documented samples: the last 256, updated every 16.
func TestReview154QuantileFollows(t *testing.T) {
	p := New() // p95
	for range 256 {
		p.Observe(10 * time.Millisecond)
	}
	if d, ok := p.After(); !ok || d != 10*time.Millisecond {
		t.Fatalf("after 256 samples of 10ms: %v %v", d, ok)
	}
	for range 256 {
		p.Observe(100 * time.Millisecond)
	}
	if d, _ := p.After(); d != 100*time.Millisecond {
		t.Errorf("after 256 samples of 100ms: delay %v, want 100ms", d)
	}
	for range 256 {
		p.Observe(10 * time.Millisecond)
	}
	if d, _ := p.After(); d != 10*time.Millisecond {
		t.Errorf("back to 256 samples of 10ms: delay %v, want 10ms", d)
	}
	// Failures at 0 latency (a coarse clock) cannot drive the delay to 0.
	for range 256 {
		p.Observe(0)
	}
	if d, ok := p.After(); !ok || d < 1 {
		t.Errorf("after 256 zero latencies: delay %v %v, want at least 1ns", d, ok)
	}
	for range 256 {
		p.Observe(-time.Second)
	}
	if d, ok := p.After(); !ok || d < 1 {
		t.Errorf("after 256 negative latencies: delay %v %v, want at least 1ns", d, ok)
	}
}

// Extreme options: panics as documented, and a huge fixed delay is kept.
func TestReview154ExtremeOptions(t *testing.T) {
	mustPanic := func(name string, f func()) {
		t.Helper()
		defer func() {
			if recover() == nil {
				t.Errorf("%s did not panic", name)
			}
		}()
		f()
	}
	mustPanic("MaxShare(0)", func() { MaxShare(0) })
	mustPanic("MaxShare(NaN)", func() { MaxShare(math.NaN()) })
	mustPanic("MaxShare(Inf)", func() { MaxShare(math.Inf(1)) })
	mustPanic("MaxShare(1.0000001)", func() { MaxShare(1.0000001) })
	mustPanic("Quantile(0)", func() { Quantile(0) })
	mustPanic("Quantile(1)", func() { Quantile(1) })
	mustPanic("Quantile(NaN)", func() { Quantile(math.NaN()) })
	mustPanic("Delay(0)", func() { Delay(0) })
	mustPanic("Delay(-1)", func() { Delay(-1) })
	mustPanic("MaxExtra(0)", func() { MaxExtra(0) })
	p := New(Delay(math.MaxInt64), MaxExtra(math.MaxInt))
	if d, ok := p.After(); !ok || d != math.MaxInt64 {
		t.Errorf("Delay(MaxInt64): After = %v %v", d, ok)
	}
	if p.Extra() != math.MaxInt {
		t.Errorf("MaxExtra(MaxInt): Extra = %d", p.Extra())
	}
	// Delay after Quantile: the last option wins, both ways.
	if d, ok := New(Delay(time.Second), Quantile(0.5)).After(); ok {
		t.Errorf("Quantile after Delay should learn (no delay yet), got %v", d)
	}
	if d, ok := New(Quantile(0.5), Delay(time.Second)).After(); !ok || d != time.Second {
		t.Errorf("Delay after Quantile: %v %v", d, ok)
	}
	// MaxShare(1): a lone call gets at most 2 hedges.
	q := New(MaxShare(1))
	q.Called()
	n := 0
	for q.Take() && n < 10 {
		n++
	}
	if n != 2 {
		t.Errorf("MaxShare(1), one call: %d hedges, want 2", n)
	}
}
