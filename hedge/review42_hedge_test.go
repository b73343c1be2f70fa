package hedge_test

import (
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/hedge"
)

func review42Panics(f func()) (p bool) {
	defer func() { p = recover() != nil }()
	f()
	return false
}

func TestReview42OptionsExtreme(t *testing.T) {
	for _, q := range []float64{math.NaN(), math.Inf(1), math.Inf(-1), 0, 1, -0.5, 1.5} {
		if !review42Panics(func() { hedge.Quantile(q) }) {
			t.Errorf("Quantile(%v) did not panic", q)
		}
	}
	for _, s := range []float64{math.NaN(), math.Inf(1), 0, -1, 1.0000001} {
		if !review42Panics(func() { hedge.MaxShare(s) }) {
			t.Errorf("MaxShare(%v) did not panic", s)
		}
	}
	for _, d := range []time.Duration{0, -1, math.MinInt64} {
		if !review42Panics(func() { hedge.Delay(d) }) {
			t.Errorf("Delay(%v) did not panic", d)
		}
	}
	if !review42Panics(func() { hedge.MaxExtra(0) }) || !review42Panics(func() { hedge.MaxExtra(math.MinInt) }) {
		t.Errorf("MaxExtra(<1) did not panic")
	}
	p := hedge.New(hedge.MaxExtra(math.MaxInt))
	if p.Extra() != math.MaxInt {
		t.Errorf("Extra %d", p.Extra())
	}
	var nilp *hedge.Policy
	if _, ok := nilp.After(); ok || nilp.Take() || nilp.Extra() != 0 || nilp.Learns() {
		t.Errorf("nil policy hedges")
	}
	nilp.Observe(time.Second)
	nilp.Called()
	// The zero Policy (not from New): documented? It must not panic.
	var zero hedge.Policy
	zero.Called()
	zero.Observe(time.Second)
	_, _ = zero.After()
	_ = zero.Take()
}

// Quantile from extreme latencies: zero, negative, the largest.
func TestReview42QuantileExtremes(t *testing.T) {
	cases := []struct {
		name string
		d    time.Duration
		want time.Duration
	}{
		{"zero", 0, 1},
		{"negative", -time.Hour, 1},
		{"min", math.MinInt64, 1},
		{"max", math.MaxInt64, math.MaxInt64},
	}
	for _, c := range cases {
		p := hedge.New()
		for range 32 {
			p.Observe(c.d)
		}
		got, ok := p.After()
		t.Logf("%s: After = %v, %v", c.name, got, ok)
		if !ok || got != c.want {
			t.Errorf("%s: After = %v, %v; want %v", c.name, got, ok, c.want)
		}
	}
	// Before 32, nothing; 31 then one more.
	p := hedge.New()
	for range 31 {
		p.Observe(time.Millisecond)
	}
	if _, ok := p.After(); ok {
		t.Errorf("hedges before 32 latencies")
	}
	p.Observe(time.Millisecond)
	if d, ok := p.After(); !ok || d != time.Millisecond {
		t.Errorf("After 32: %v %v", d, ok)
	}
}

// The delay is the q-quantile of the last 256 latencies.
func TestReview42QuantileValue(t *testing.T) {
	for _, q := range []float64{0.5, 0.9, 0.95, 0.99, 1e-9, 0.999999} {
		p := hedge.New(hedge.Quantile(q))
		// 1..256 ms, in a scrambled order
		for i := range 256 {
			p.Observe(time.Duration((i*97)%256+1) * time.Millisecond)
		}
		got, _ := p.After()
		want := time.Duration(int(q*255)+1) * time.Millisecond
		if got != want {
			t.Errorf("q=%v: %v, want %v", q, got, want)
		}
		// The window: 256 more, all 1 s: the old ones are gone.
		for range 256 {
			p.Observe(time.Second)
		}
		if got, _ := p.After(); got != time.Second {
			t.Errorf("q=%v after a shift: %v", q, got)
		}
	}
}

// Concurrent Observes: the delay is always one of the latencies seen
// (never a zero from a slot not yet written while the count said it was).
func TestReview42ObserveConcurrent(t *testing.T) {
	for round := range 50 {
		p := hedge.New(hedge.Quantile(0.01)) // the low end shows a stray zero
		var wg sync.WaitGroup
		var stop atomic.Bool
		var bad atomic.Int64
		go func() {
			for !stop.Load() {
				if d, ok := p.After(); ok && d != time.Second {
					bad.Store(int64(d))
				}
			}
		}()
		for range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 200 {
					p.Observe(time.Second)
				}
			}()
		}
		wg.Wait()
		stop.Store(true)
		if bad.Load() != 0 {
			t.Fatalf("round %d: delay %v, though every latency was 1 s", round, time.Duration(bad.Load()))
		}
	}
}

// MaxShare: over the policy's own window, hedges <= share*calls + 1, under
// concurrency; Take is never more generous than that.
func TestReview42TakeConcurrent(t *testing.T) {
	for _, share := range []float64{0.001, 0.1, 0.5, 1} {
		p := hedge.New(hedge.MaxShare(share))
		var wg sync.WaitGroup
		var taken atomic.Int64
		const g, each = 1000, 20
		for range g {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range each {
					p.Called()
					for range 3 {
						if p.Take() {
							taken.Add(1)
						}
					}
				}
			}()
		}
		wg.Wait()
		limit := math.Floor(share*g*each) + 2
		t.Logf("share %v: %d calls, %d hedges taken, limit %v", share, g*each, taken.Load(), limit)
		if float64(taken.Load()) > limit {
			t.Errorf("share %v: %d hedges for %d calls", share, taken.Load(), g*each)
		}
	}
}

// Over any real span of 10 s, the hedges are at most twice MaxShare of the
// calls in it plus one, and one more (the doc): the window is 10 buckets
// of 1 s, and a span across a bucket's edge sees two windows' budgets.
func TestReview42ShareOverSlidingWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := hedge.New(hedge.MaxShare(0.1))
		type ev struct {
			at    time.Duration
			hedge bool
		}
		var evs []ev
		start := time.Now()
		now := func() time.Duration { return time.Since(start) }
		call := func(n int) {
			for range n {
				p.Called()
				evs = append(evs, ev{now(), false})
			}
		}
		take := func(n int) int {
			k := 0
			for range n {
				if p.Take() {
					k++
					evs = append(evs, ev{now(), true})
				}
			}
			return k
		}
		time.Sleep(900 * time.Millisecond)
		call(100)
		time.Sleep(9 * time.Second) // t = 9.9 s
		t.Logf("t=9.9s: took %d", take(100))
		time.Sleep(200 * time.Millisecond) // t = 10.1 s
		call(100)
		time.Sleep(8900 * time.Millisecond) // t = 19.0 s
		t.Logf("t=19.0s: took %d", take(100))
		// the worst real window of 10 s
		worst, wc, wh := 0.0, 0, 0
		for _, a := range evs { // the 10 s up to each event
			c, h := 0, 0
			for _, b := range evs {
				if b.at <= a.at && b.at > a.at-10*time.Second {
					if b.hedge {
						h++
					} else {
						c++
					}
				}
			}
			if r := float64(h) - 2*(0.1*float64(c)+1); r > worst {
				worst, wc, wh = r, c, h
			}
		}
		if worst > 1 {
			t.Errorf("a 10 s span held %d hedges for %d calls (MaxShare 0.1: at most %v)", wh, wc, math.Ceil(2*(0.1*float64(wc)+1)))
		}
	})
}
