package breaker

import (
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/resilience"
)

func review143Core(window time.Duration, n int, trip func(Counts) bool) *core {
	if trip == nil {
		trip = func(Counts) bool { return false }
	}
	return newCore(1, time.Second, window, n, trip, func(from, to resilience.State) {})
}

func review143Alone() bool { return true }

// A run of failures kept by forget, then calls since (all successes), then
// halve: the failure rate must still leave the kept run out.
func TestReview143HalveKeepsRunOutOfRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rate := func(n Counts) bool {
			done := uint64(n.TotalSuccesses) + uint64(n.TotalFailures)
			return done >= 1 && float64(n.TotalFailures) >= 0.5*float64(done)
		}
		c := review143Core(60*time.Second, 6, rate)
		const k = 1 << 30
		// The fleet judged: a run of k failures (ConsecutiveFailures(0), the fleet's rate not met).
		c.buckets[0] = Counts{Requests: k, TotalFailures: k}
		c.win = Counts{Requests: k, TotalFailures: k, ConsecutiveFailures: k}
		c.forget(review143Alone)
		if c.keptN != k {
			t.Fatalf("keptN = %d, want %d", c.keptN, k)
		}
		// Since going alone: k successes.
		c.buckets[0].Requests += k
		c.buckets[0].TotalSuccesses += k
		c.win.Requests += k
		c.win.TotalSuccesses += k
		c.win.ConsecutiveFailures, c.win.ConsecutiveSuccesses = 0, k
		if rate(c.judged()) {
			t.Fatalf("before halve the rate trips: %+v", c.judged())
		}
		v, a := c.admit() // halves: win.Requests = 2^31
		if v != admitted {
			t.Fatal("not admitted")
		}
		c.done(a, failed) // 1 failure since alone among 2^29+ successes
		if st := c.State(); st != resilience.StateClosed {
			t.Fatalf("one failure in 2^29 calls since going alone opened the breaker: judged %+v, keptN %d", c.judged(), c.keptN)
		}
	})
}

// halve leaves ConsecutiveFailures above TotalFailures; forget then loses
// the run ("ConsecutiveFailures goes on with the run before").
func TestReview143HalveThenForgetKeepsRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := review143Core(60*time.Second, 6, nil)
		c.buckets[0] = Counts{Requests: halveAt, TotalSuccesses: halveAt - 1, TotalFailures: 1}
		c.win = Counts{Requests: halveAt, TotalSuccesses: halveAt - 1, TotalFailures: 1, ConsecutiveFailures: 1}
		_, a := c.admit() // halves
		c.done(a, excluded)
		if got := c.Counts().ConsecutiveFailures; got != 1 {
			t.Fatalf("after halve ConsecutiveFailures = %d", got)
		}
		c.forget(review143Alone)
		if got := c.Counts().ConsecutiveFailures; got != 1 {
			t.Fatalf("forget after halve dropped the run: ConsecutiveFailures = %d, want 1", got)
		}
	})
}

// Counts().Requests counts "the calls admitted, finished or not": calls in
// flight as forget runs, then finished, must not leave Requests below the
// finished calls.
func TestReview143ForgetInFlightRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := review143Core(60*time.Second, 6, nil)
		var as []admission
		for range 3 {
			_, a := c.admit()
			as = append(as, a)
		}
		c.forget(review143Alone)
		for _, a := range as {
			c.done(a, failed)
		}
		n := c.Counts()
		if n.Requests < n.TotalFailures+n.TotalSuccesses+n.TotalExclusions {
			t.Fatalf("Requests %d below finished calls %+v", n.Requests, n)
		}
	})
}

// A model-based attack: random admissions, outcomes, time steps, forgets
// (with runs of both kinds), one or many buckets. Promise: judged counts
// exactly the outcomes counted since the last forget still in the window,
// keptN is the sum of kept and never above what it is subtracted from.
func TestReview143KeptModel(t *testing.T) {
	for _, nb := range []int{1, 2, 3, 6} {
		for seed := range uint64(300) {
			review143Model(t, nb, seed)
			if t.Failed() {
				return
			}
		}
	}
}

type review143Out struct {
	age   uint64 // bucket it counts in
	bad   bool
	since bool // counted after the last forget
}

func review143Model(t *testing.T, nb int, seed uint64) {
	synctest.Test(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(seed, uint64(nb)))
		window := time.Duration(nb) * time.Second
		c := review143Core(window, nb, nil)
		var outs []review143Out
		var inflight []admission
		lastAge := uint64(0)
		for step := range 400 {
			switch op := r.IntN(10); {
			case op < 3:
				v, a := c.admit()
				if v == admitted {
					inflight = append(inflight, a)
				}
			case op < 6 && len(inflight) > 0:
				i := r.IntN(len(inflight))
				a := inflight[i]
				inflight = append(inflight[:i], inflight[i+1:]...)
				o := counted
				if r.IntN(3) == 0 {
					o = failed
				} else if r.IntN(8) == 0 {
					o = excluded
				}
				c.done(a, o)
				if o != excluded {
					c.mu.Lock()
					n := uint64(len(c.buckets))
					age := a.age
					if age+n <= c.age {
						age = c.age
					}
					c.mu.Unlock()
					outs = append(outs, review143Out{age: age, bad: o == failed, since: true})
				}
			case op < 8:
				time.Sleep(time.Duration(r.IntN(1500)) * time.Millisecond)
			case op < 9:
				c.forget(review143Alone)
				for i := range outs {
					outs[i].since = false
				}
			default:
				c.Counts()
			}
			c.mu.Lock()
			n := uint64(len(c.buckets))
			if c.age != lastAge && nb == 1 {
				// one bucket: a new window; everything before is gone
				kept := outs[:0]
				for _, o := range outs {
					if o.age == c.age {
						kept = append(kept, o)
					}
				}
				outs = kept
			}
			lastAge = c.age
			var wantF, wantS uint32
			for _, o := range outs {
				if !o.since || o.age+n <= c.age {
					continue
				}
				if o.bad {
					wantF++
				} else {
					wantS++
				}
			}
			j := c.judged()
			var sum uint32
			for _, k := range c.kept {
				sum += k
			}
			win := c.win
			keptN, keptBad := c.keptN, c.keptBad
			c.mu.Unlock()
			if sum != keptN {
				t.Fatalf("nb %d seed %d step %d: keptN %d, sum of kept %d", nb, seed, step, keptN, sum)
			}
			if keptN > 0 && ((keptBad && keptN > win.TotalFailures) || (!keptBad && keptN > win.TotalSuccesses)) {
				t.Fatalf("nb %d seed %d step %d: keptN %d above win %+v", nb, seed, step, keptN, win)
			}
			if j.TotalFailures != wantF || j.TotalSuccesses != wantS {
				t.Fatalf("nb %d seed %d step %d: judged F %d S %d, want since forget F %d S %d (win %+v keptN %d)", nb, seed, step, j.TotalFailures, j.TotalSuccesses, wantF, wantS, win, keptN)
			}
		}
	})
}

// Concurrency: forget, admissions, outcomes and Counts at once (-race).
func TestReview143KeptRace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := review143Core(3*time.Second, 3, func(n Counts) bool { return n.ConsecutiveFailures > 1000000 })
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Go(func() {
				for i := range 500 {
					v, a := c.admit()
					if v == admitted {
						if (i+g)%3 == 0 {
							c.done(a, failed)
						} else {
							c.done(a, counted)
						}
					}
					if i%50 == 0 {
						time.Sleep(700 * time.Millisecond)
					}
				}
			})
		}
		wg.Go(func() {
			for range 100 {
				c.forget(review143Alone)
				c.Counts()
				time.Sleep(100 * time.Millisecond)
			}
		})
		wg.Wait()
		c.mu.Lock()
		defer c.mu.Unlock()
		var sum uint32
		for _, k := range c.kept {
			sum += k
		}
		if sum != c.keptN {
			t.Fatalf("keptN %d, sum %d", c.keptN, sum)
		}
	})
}
