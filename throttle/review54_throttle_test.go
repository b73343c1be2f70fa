package throttle_test

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/throttle"
)

var r54Overload = errors.New("503")

func review54Panics(f func()) (p bool) {
	defer func() { p = recover() != nil }()
	f()
	return false
}

func TestReview54ExtremeOptions(t *testing.T) {
	for _, k := range []float64{math.NaN(), math.Inf(1), math.Inf(-1), 0, -1, 1, 1.09, math.SmallestNonzeroFloat64} {
		if !review54Panics(func() { throttle.K(k) }) {
			t.Errorf("K(%v) did not panic", k)
		}
	}
	for _, k := range []float64{1.1, 2, 1e308, math.MaxFloat64} {
		if review54Panics(func() { throttle.New(throttle.K(k)) }) {
			t.Errorf("K(%v) panicked", k)
		}
	}
	for _, d := range []time.Duration{0, -1, math.MinInt64, 9 * time.Millisecond} {
		if !review54Panics(func() { throttle.Window(d) }) {
			t.Errorf("Window(%v) did not panic", d)
		}
	}
	// Huge window and huge K: must still work and refuse nothing while healthy; K huge never refuses.
	synctest.Test(t, func(t *testing.T) {
		for _, opts := range [][]throttle.Option{{throttle.Window(math.MaxInt64)}, {throttle.K(math.MaxFloat64)}, {throttle.Window(10 * time.Millisecond)}, {nil}} {
			th := throttle.New(opts...)
			for range 200 {
				tk, err := th.Admit()
				if err != nil {
					t.Fatalf("%v: refused while healthy", opts)
				}
				th.Done(tk, nil)
				time.Sleep(time.Millisecond)
			}
		}
		// K huge: an outage is never throttled (by design), and p stays finite.
		th := throttle.New(throttle.K(math.MaxFloat64))
		for range 1000 {
			tk, err := th.Admit()
			if err == nil {
				th.Done(tk, r54Overload)
			}
		}
		if p := th.RejectProbability(); math.IsNaN(p) || p < 0 || p > 1 {
			t.Errorf("p = %v", p)
		}
		// Window(MaxInt64): outage then p in [0,1]
		th = throttle.New(throttle.Window(math.MaxInt64))
		for range 1000 {
			tk, err := th.Admit()
			if err == nil {
				th.Done(tk, r54Overload)
			}
		}
		if p := th.RejectProbability(); math.IsNaN(p) || p <= 0 || p > 1 {
			t.Errorf("Window(MaxInt64) after outage: p = %v", p)
		}
	})
	var nilT *throttle.Throttle
	if tk, err := nilT.Admit(); err != nil {
		t.Error(err)
	} else {
		nilT.Done(tk, r54Overload)
	}
}

// Formula bounds: p in [0,1], p <= (req - K*(acc+1))/(req+1) as documented with out=0.
func TestReview54FormulaBounds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, k := range []float64{1.1, 2, 3} {
			th := throttle.New(throttle.K(k))
			req, acc := 0, 0
			for i := range 500 {
				tk, err := th.Admit()
				req++
				if err == nil {
					if i%7 == 0 {
						th.Done(tk, nil)
						acc++
					} else {
						th.Done(tk, r54Overload)
					}
				}
				p := th.RejectProbability()
				want := max(0, (float64(req)-k*float64(acc+1))/float64(req+1))
				if p < 0 || p > 1 || math.IsNaN(p) {
					t.Fatalf("p = %v", p)
				}
				if p > want+1e-9 {
					t.Fatalf("k=%v req=%d acc=%d: p = %v > formula %v", k, req, acc, p, want)
				}
			}
		}
	})
}

// Many goroutines, healthy dependency with some failures (1 in 10): no refusal, no leak of out.
func TestReview54ConcurrentHealthy(t *testing.T) {
	th := throttle.New()
	var wg sync.WaitGroup
	var mu sync.Mutex
	refused := 0
	for g := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := 0
			for i := range 3000 {
				tk, err := th.Admit()
				if err != nil {
					n++
					continue
				}
				var e error
				switch (i + g) % 10 {
				case 0:
					e = r54Overload
				case 1:
					e = context.Canceled
				case 2:
					e = resilience.Permanent(errors.New("400"))
				}
				th.Done(tk, e)
			}
			mu.Lock()
			refused += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	if refused != 0 {
		t.Errorf("refused %d of %d attempts to a dependency failing 1 in 10", refused, 64*3000)
	}
	if p := th.RejectProbability(); p != 0 {
		t.Errorf("p = %v after", p)
	}
}

// A lightly used healthy dependency (5 calls/s), a pool of 10 stale
// connections reset at once, then each call retried once (the retry would
// succeed). How many retries does the throttle refuse?
func TestReview54StaleResetWithSomeAccepts(t *testing.T) {
	refusedTotal, total := 0, 0
	for range 20 {
		synctest.Test(t, func(t *testing.T) {
			th := throttle.New()
			for range 50 { // 10 s at 5/s
				tk, _ := th.Admit()
				th.Done(tk, nil)
				time.Sleep(200 * time.Millisecond)
			}
			time.Sleep(5 * time.Second) // idle: 5 s of accepts remain in the window? no: 25 left
			var tks []throttle.Ticket
			for range 10 {
				tk, err := th.Admit()
				if err != nil {
					t.Fatal("first attempts refused")
				}
				tks = append(tks, tk)
			}
			for _, tk := range tks {
				th.Done(tk, r54Overload) // connection reset
			}
			for range 10 { // retries
				total++
				tk, err := th.Admit()
				if err != nil {
					refusedTotal++
					continue
				}
				th.Done(tk, nil)
			}
		})
	}
	t.Logf("stale reset after light healthy traffic: %d of %d retries refused", refusedTotal, total)
	if refusedTotal > 0 {
		t.Errorf("%d of %d retries to a healthy dependency refused", refusedTotal, total)
	}
}

// A blip of 10 failures amid a low rate of accepts, then a burst of
// concurrent attempts to the now healthy (slow, 1 s) dependency.
func TestReview54BurstAfterBlip(t *testing.T) {
	refusedTotal, total := 0, 0
	for range 10 {
		synctest.Test(t, func(t *testing.T) {
			th := throttle.New()
			for range 10 { // 1 call/s healthy
				tk, _ := th.Admit()
				th.Done(tk, nil)
				time.Sleep(time.Second)
			}
			for range 10 { // blip: 10 quick failures
				tk, err := th.Admit()
				if err == nil {
					th.Done(tk, r54Overload)
				}
			}
			time.Sleep(100 * time.Millisecond)
			var tks []throttle.Ticket
			for range 500 { // burst, all out
				total++
				tk, err := th.Admit()
				if err != nil {
					refusedTotal++
					continue
				}
				tks = append(tks, tk)
			}
			time.Sleep(time.Second)
			for _, tk := range tks {
				th.Done(tk, nil)
			}
		})
	}
	t.Logf("burst after blip: %d of %d refused", refusedTotal, total)
	if refusedTotal > 0 {
		t.Errorf("%d of %d burst attempts to a healthy dependency refused", refusedTotal, total)
	}
}

// After a busy spell (the clock is read once in 64 attempts) and an idle
// one, a burst to a healthy dependency: 53 answers accepted, then a pool
// of 10 stale connections reset, then those 10 retried at once. The
// accepts are in the window: the doc's "no accept" case does not apply.
func TestReview54IdleThenStaleReset(t *testing.T) {
	refusedTotal, total := 0, 0
	for range 50 {
		synctest.Test(t, func(t *testing.T) {
			th := throttle.New()
			for range 200 { // busy: 10,000 calls a second for 2 s
				for range 100 {
					tk, _ := th.Admit()
					th.Done(tk, nil)
				}
				time.Sleep(10 * time.Millisecond)
			}
			time.Sleep(15 * time.Second) // idle
			var tks []throttle.Ticket
			for range 63 {
				tk, err := th.Admit()
				if err != nil {
					t.Fatal("refused first attempt")
				}
				tks = append(tks, tk)
			}
			time.Sleep(5 * time.Millisecond)
			for _, tk := range tks[:53] {
				th.Done(tk, nil)
			}
			for _, tk := range tks[53:] {
				th.Done(tk, r54Overload) // reset
			}
			var rt []throttle.Ticket
			for range 10 { // the retries, at once
				total++
				tk, err := th.Admit()
				if err != nil {
					refusedTotal++
					continue
				}
				rt = append(rt, tk)
			}
			for _, tk := range rt {
				th.Done(tk, nil)
			}
		})
	}
	t.Logf("idle then stale reset: %d of %d retries refused", refusedTotal, total)
	if refusedTotal > 0 {
		t.Errorf("%d of %d retries to a healthy dependency (53 accepts of 63 in the window) refused", refusedTotal, total)
	}
}
