package idempotency

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
)

// Promise (4): the probe chain never doubles nor dies while it should
// run; no leak, no race on a flapping store.

// A failure at the very instant the chain sees the store answered (a
// success between) and ends: the chain must go on, and a dead store with
// no further request must fail the guard open, so the next request runs.
func TestReview152FailureRacingTheChainsEndKeepsItGoing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const guards = 60
		var dead []string
		var mu sync.Mutex
		var wg sync.WaitGroup
		for i := range guards {
			wg.Go(func() {
				s := newR152Store()
				g, _ := r152Guard(s)
				t0 := time.Now()
				fail := r152FailNext(s)
				fail.Store(1)
				r152Run(g, "a") // chain starts: ask at t0+1s
				time.Sleep(500 * time.Millisecond)
				r152Run(g, "b") // answered: the ask at t0+1s ends the chain
				s.setBegin(func(string) int { return r152Fail })
				// Race the ask at t0+1s (skew by i ns... same instant in the bubble).
				r152SleepUntil(t0, time.Second+time.Duration(i%3-1)*time.Nanosecond)
				r152Run(g, "c")
				r152SleepUntil(t0, 17*time.Second)
				got := r152Run(g, "d")
				if got != "ran-local" {
					mu.Lock()
					dead = append(dead, fmt.Sprintf("guard %d: %s (asking=%v open=%v)", i, got, g.asking.Load(), g.out.isOpen()))
					mu.Unlock()
				}
				s.setBegin(nil)
				for j := range 5 {
					time.Sleep(time.Second)
					r152Run(g, fmt.Sprintf("e%d", j))
				}
			})
		}
		wg.Wait()
		if len(dead) > 0 {
			t.Errorf("%d of %d guards: the chain died racing a failure; a dead store with no requests never failed open: %v", len(dead), guards, dead[:min(len(dead), 5)])
		}
	})
}

// Probes of one guard never come two at once: at most one chain.
func TestReview152ProbeChainNeverDoubles(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newR152Store()
		var mu sync.Mutex
		var probes []time.Time
		r := newR152Rand(7)
		s.setBegin(func(key string) int {
			if key == probeKey {
				mu.Lock()
				probes = append(probes, time.Now())
				mu.Unlock()
			}
			if r.under(0.5) {
				return r152Fail
			}
			return r152OK
		})
		g, _ := r152Guard(s, FailOpenAfter(time.Hour)) // the chain runs as long as the store flaps
		var wg sync.WaitGroup
		for w := range 16 {
			wg.Go(func() {
				for i := range 150 {
					r152Run(g, fmt.Sprintf("w%d-%d", w, i%40))
					time.Sleep(time.Duration(37+w*13) * time.Millisecond)
				}
			})
		}
		wg.Wait()
		s.setBegin(nil)
		time.Sleep(5 * time.Second)
		if g.asking.Load() {
			t.Errorf("the chain still runs after the store answered")
		}
		mu.Lock()
		defer mu.Unlock()
		close := 0
		for i := 1; i < len(probes); i++ {
			if probes[i].Sub(probes[i-1]) < 900*time.Millisecond {
				close++
			}
		}
		t.Logf("%d probes, %d under 900 ms after the last", len(probes), close)
		if close > 0 {
			t.Errorf("two probe chains at once: %d probes under 900 ms apart", close)
		}
	})
}

// -race and goleak: many goroutines on a store flapping between up, down,
// hanging and refusing, FailOpenAfter short so the guard opens and closes.
func TestReview152FlappingStoreRaceAndLeak(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		s := newR152Store()
		var phase atomic.Int64
		r := newR152Rand(11)
		s.setBegin(func(string) int {
			switch phase.Load() % 4 {
			case 1:
				return r152Fail
			case 2:
				if r.under(0.3) {
					return r152Hang
				}
				return r152Refuse
			case 3:
				if r.under(0.5) {
					return r152Fail
				}
			}
			return r152OK
		})
		s.setWrite(func(op, _ string) int {
			if phase.Load()%4 == 1 && r.under(0.5) {
				return r152Fail
			}
			return r152OK
		})
		g, _ := r152Guard(s, FailOpenAfter(time.Second), StoreTimeout(100*time.Millisecond), Lease(3*time.Second))
		stop := make(chan struct{})
		go func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-time.After(1700 * time.Millisecond):
					phase.Add(1)
				}
			}
		}()
		var wg sync.WaitGroup
		var runs sync.Map
		var twice atomic.Int64
		for w := range 24 {
			wg.Go(func() {
				for i := range 60 {
					k := fmt.Sprintf("k%d", (w*7+i)%50)
					c, _, err := g.Begin(t.Context(), "s", k, "fp")
					if err == nil && c != nil {
						if _, loaded := runs.LoadOrStore(k, true); loaded {
							twice.Add(1)
						}
						time.Sleep(30 * time.Millisecond)
						_ = c.Complete(t.Context(), Record{Status: 200})
					}
					time.Sleep(time.Duration(20+w) * time.Millisecond)
				}
			})
		}
		wg.Wait()
		close(stop)
		s.setBegin(nil)
		s.setWrite(nil)
		for i := range 6 {
			time.Sleep(time.Second)
			r152Run(g, fmt.Sprintf("end%d", i))
		}
		time.Sleep(10 * time.Second)
		t.Logf("keys run more than once (expected across fail-open episodes): %d; asking=%v bad=%v", twice.Load(), g.asking.Load(), g.out.bad.Load())
		if g.asking.Load() || g.out.isOpen() {
			t.Errorf("after the store came back: asking=%v open=%v", g.asking.Load(), g.out.isOpen())
		}
	})
}
