package hedge_test

// review169: extreme hedging options.

import (
	"fmt"
	"math"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/hedge"
)

const r169Max = time.Duration(math.MaxInt64)

// TestReview169QuantileExtremes: whatever the quantile in (0, 1) and the
// latencies observed (0, negative, MaxInt64), After gives a positive
// delay once 32 are known, within the range of those observed (at least
// 1 ns).
func TestReview169QuantileExtremes(t *testing.T) {
	qs := []float64{5e-324, 1e-300, 0.5, 0.95, math.Nextafter(1, 0)}
	lats := [][]time.Duration{
		{0}, {-1}, {-r169Max}, {r169Max}, {1}, {0, r169Max}, {-1, r169Max, 1, time.Second},
	}
	for _, q := range qs {
		for _, ls := range lats {
			t.Run(fmt.Sprintf("q=%g/lats=%v", q, ls), func(t *testing.T) {
				p := hedge.New(hedge.Quantile(q))
				lo, hi := r169Max, time.Duration(1)
				for _, l := range ls {
					lo, hi = min(lo, max(l, 1)), max(hi, l)
				}
				for i := range 300 {
					p.Observe(ls[i%len(ls)])
					d, ok := p.After()
					if i+1 < 32 {
						if ok {
							t.Fatalf("hedges after %d latencies (%v), doc: once 32 are known", i+1, d)
						}
						continue
					}
					if !ok || d < 1 || d < lo || d > hi {
						t.Fatalf("after %d latencies %v: After = %v, %v; want in [%v, %v]", i+1, ls, d, ok, lo, hi)
					}
				}
			})
		}
	}
}

// TestReview169FixedDelayExtremes: After returns the fixed delay exactly.
func TestReview169FixedDelayExtremes(t *testing.T) {
	for _, d := range []time.Duration{1, time.Nanosecond * 2, r169Max - 1, r169Max} {
		p := hedge.New(hedge.Delay(d), hedge.MaxExtra(math.MaxInt))
		if got, ok := p.After(); !ok || got != d {
			t.Fatalf("Delay(%d): After %v, %v", d, got, ok)
		}
		if p.Extra() != math.MaxInt {
			t.Fatalf("MaxExtra(MaxInt): Extra %d", p.Extra())
		}
	}
}

// TestReview169ShareExtremes: MaxShare(tiny) allows the "plus one" hedge
// per window and no more; MaxShare(1) at most one hedge per call plus
// one.
func TestReview169ShareExtremes(t *testing.T) {
	for _, share := range []float64{5e-324, 1e-300, 1e-9, 1} {
		t.Run(fmt.Sprint(share), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := hedge.New(hedge.Delay(time.Millisecond), hedge.MaxShare(share))
				calls := 1000
				for range calls {
					p.Called()
				}
				took := 0
				for range 3000 {
					if p.Take() {
						took++
					}
				}
				bound := int(math.Floor(share*float64(calls))) + 1
				if share*float64(calls) != math.Floor(share*float64(calls)) {
					bound++ // "up to one more than that share plus one, where it is not a whole number"
				}
				if took > bound || took < 1 {
					t.Fatalf("share %g, %d calls: %d hedges taken, bound %d", share, calls, took, bound)
				}
			})
		})
	}
}
