package hedge

import (
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

type ev67 struct {
	at    time.Duration
	hedge bool
}

// worst67 returns the largest hedges - (share*calls+1) over every 10 s span (t-10s, t]
// ending at a hedge, and over bucket-aligned windows.
func worst67(evs []ev67, share float64) (span, aligned float64) {
	span, aligned = math.Inf(-1), math.Inf(-1)
	for i, e := range evs {
		if !e.hedge {
			continue
		}
		var h, c float64
		for j := i; j >= 0 && evs[j].at > e.at-10*time.Second; j-- {
			if evs[j].hedge {
				h++
			} else {
				c++
			}
		}
		span = max(span, h-(share*c+1))
		// aligned window: buckets of 1 s ending with e's bucket
		end := e.at.Truncate(time.Second) + time.Second
		h, c = 0, 0
		for _, f := range evs {
			if f.at >= end-10*time.Second && f.at < end {
				if f.hedge {
					h++
				} else {
					c++
				}
			}
		}
		aligned = max(aligned, h-(share*c+1))
	}
	return
}

func run67(t *testing.T, share float64, script func(p *Policy, call func(takes int))) (calls, hedges int, evs []ev67) {
	synctest.Test(t, func(t *testing.T) {
		p := New(Delay(time.Millisecond), MaxShare(share))
		start := time.Now()
		call := func(takes int) {
			p.Called()
			evs = append(evs, ev67{at: time.Since(start)})
			calls++
			for range takes {
				if p.Take() {
					evs = append(evs, ev67{at: time.Since(start), hedge: true})
					hedges++
				}
			}
		}
		script(p, call)
	})
	return
}

func check67(t *testing.T, name string, share float64, calls, hedges int, evs []ev67) {
	span, aligned := worst67(evs, share)
	t.Logf("%s: calls %d hedges %d; worst excess over share*calls+1: span %.2f aligned %.2f", name, calls, hedges, span, aligned)
	if aligned >= 1 {
		t.Errorf("%s: an aligned window has %.2f hedges more than share*calls+1 allows (budget: fewer than)", name, aligned)
	}
}

// A quiet service: a call every 1.5 s, each slow enough to want 3 hedges.
func TestReview67QuietService(t *testing.T) {
	calls, hedges, evs := run67(t, 0.1, func(p *Policy, call func(int)) {
		for range 100 {
			call(3)
			time.Sleep(1500 * time.Millisecond)
		}
	})
	check67(t, "quiet", 0.1, calls, hedges, evs)
	// Do its calls fund hedges? at 0.1, ~6.7 calls a window: budget 1.67 -> 2 hedges per 10 s.
	if hedges < 100*15/100/10*2 {
		t.Logf("few hedges: %d", hedges)
	}
}

// Busy then lull then quiet.
func TestReview67BusyLullQuiet(t *testing.T) {
	for _, lull := range []time.Duration{500 * time.Millisecond, 3 * time.Second, 9500 * time.Millisecond, 10 * time.Second, 30 * time.Second, 10*time.Hour + 300*time.Millisecond} {
		calls, hedges, evs := run67(t, 0.1, func(p *Policy, call func(int)) {
			for range 3000 { // 3000 calls a second for 3 s: every -> 64
				for range 30 {
					call(0)
				}
				time.Sleep(10 * time.Millisecond)
			}
			time.Sleep(lull)
			for range 40 {
				call(5)
				time.Sleep(700 * time.Millisecond)
			}
		})
		check67(t, "lull "+lull.String(), 0.1, calls, hedges, evs)
	}
}

// Busy period with every call wanting a hedge, then lull, then a burst.
func TestReview67BusyHedgingLullBurst(t *testing.T) {
	for _, lull := range []time.Duration{0, 990 * time.Millisecond, 5 * time.Second, 12 * time.Second} {
		calls, hedges, evs := run67(t, 0.05, func(p *Policy, call func(int)) {
			for range 500 {
				for range 20 {
					call(1)
				}
				time.Sleep(10 * time.Millisecond)
			}
			time.Sleep(lull)
			for range 200 {
				call(2)
			}
			time.Sleep(100 * time.Millisecond)
			for range 200 {
				call(2)
			}
		})
		check67(t, "burst after "+lull.String(), 0.05, calls, hedges, evs)
	}
}

// Many goroutines, real time: total hedges within a second bounded by share*calls+1
// (two windows at most if straddling).
func TestReview67ConcurrentTake(t *testing.T) {
	for _, share := range []float64{0.01, 0.1, 1} {
		p := New(MaxShare(share))
		var calls, hedges atomic.Int64
		var wg sync.WaitGroup
		stop := time.Now().Add(700 * time.Millisecond)
		for range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(stop) {
					p.Called()
					calls.Add(1)
					for range 3 {
						if p.Take() {
							hedges.Add(1)
						}
					}
				}
			}()
		}
		wg.Wait()
		c, h := calls.Load(), hedges.Load()
		t.Logf("share %v: calls %d hedges %d (limit %.1f)", share, c, h, share*float64(c)+1)
		if float64(h) >= share*float64(c)+1+1 { // a concurrent Take at a bucket edge may add one
			t.Errorf("share %v: %d hedges for %d calls", share, h, c)
		}
	}
}

// Concurrent Take in a synctest bubble straddling second edges: goroutines
// block on a time.Sleep so that they all wake in the same instant.
func TestReview67ConcurrentTakeSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := New(MaxShare(0.1))
		var calls, hedges atomic.Int64
		var wg sync.WaitGroup
		for g := range 200 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 200 {
					p.Called()
					calls.Add(1)
					if (g+i)%7 == 0 {
						for range 3 {
							if p.Take() {
								hedges.Add(1)
							}
						}
					}
					time.Sleep(time.Duration(1+(g*31+i)%97) * time.Millisecond)
				}
			}()
		}
		wg.Wait()
		t.Logf("calls %d hedges %d", calls.Load(), hedges.Load())
	})
}

// Extreme latencies for the adaptive delay.
func TestReview67AdaptiveExtremes(t *testing.T) {
	cases := map[string][]time.Duration{
		"zero":  {0},
		"neg":   {-time.Hour},
		"1ns":   {1},
		"hours": {5 * time.Hour},
		"max":   {math.MaxInt64},
		"min":   {math.MinInt64},
		"mixed": {0, 1, math.MaxInt64, time.Hour, -1},
	}
	for name, lats := range cases {
		for _, q := range []float64{math.SmallestNonzeroFloat64, 0.5, 0.95, math.Nextafter(1, 0)} {
			p := New(Quantile(q))
			for i := range 300 {
				p.Observe(lats[i%len(lats)])
			}
			d, ok := p.After()
			if !ok || d <= 0 {
				t.Errorf("%s q=%v: After = %v %v", name, q, d, ok)
			}
		}
	}
	// quantile 1.0 must panic as documented
	func() {
		defer func() {
			if recover() == nil {
				t.Error("Quantile(1) did not panic")
			}
		}()
		Quantile(1)
	}()
}

// Observe concurrently with the quantile update: delay stays among observed values.
func TestReview67ObserveRace(t *testing.T) {
	p := New(Quantile(0.9))
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20000 {
				p.Observe(time.Duration(1+(g+i)%100) * time.Millisecond)
				if d, ok := p.After(); ok && (d < time.Millisecond || d > 100*time.Millisecond) {
					t.Errorf("delay %v out of range", d)
					return
				}
			}
		}()
	}
	wg.Wait()
	d, _ := p.After()
	t.Logf("delay %v", d)
}
