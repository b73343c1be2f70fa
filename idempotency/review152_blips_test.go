package idempotency

import (
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// Promise (2): isolated transient errors on a healthy store never fail the
// guard open, so a key the store holds is never run again.

// r152FailNext makes the next n Begins (probes included) fail.
func r152FailNext(s *r152Store) *atomic.Int64 {
	var n atomic.Int64
	s.setBegin(func(string) int {
		if n.Add(-1) >= 0 {
			return r152Fail
		}
		return r152OK
	})
	return &n
}

// Two single blips ten seconds apart on a quiet guard, the first followed
// by the client's retry (which the store answers) before the guard's own
// probe: the retry's answer ends the probe chain without `settled`, the
// run of failures keeps its start, and the retry's second keeps the window
// from going quiet, so the second blip fails the healthy guard open.
func TestReview152TwoBlipsAndAQuickRetryFailAHealthyGuardOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newR152Store()
		g, opened := r152Guard(s)
		if got := r152Run(g, "held"); got != "ran" {
			t.Fatalf("held: %s", got)
		}
		r152Align(50 * time.Millisecond)
		t0 := time.Now()
		fail := r152FailNext(s)

		fail.Store(1)
		got1 := r152Run(g, "a1") // blip 1
		r152SleepUntil(t0, 960*time.Millisecond)
		got2 := r152Run(g, "a1") // the client's retry, before the probe at t0+1s
		r152SleepUntil(t0, 10450*time.Millisecond)
		fail.Store(1)
		got3 := r152Run(g, "a3") // blip 2
		got4 := r152Run(g, "held")
		t.Logf("blip1=%s retry=%s blip2=%s held=%s opened=%d", got1, got2, got3, got4, opened.Load())
		if opened.Load() != 0 {
			t.Errorf("two isolated blips on a healthy store failed the guard open (%d)", opened.Load())
		}
		if got4 != "replayed" {
			t.Errorf("a key the healthy store holds was not replayed: %s", got4)
		}
		time.Sleep(5 * time.Second) // let the probes end the episode
	})
}

// Three blips S seconds apart, each followed 100 ms later by the client's
// retry, which the store answers: no probe ever gets through (the retry
// answers first), so nothing ends the run of failures.
func TestReview152PeriodicBlipsWithRetriesFailAHealthyGuardOpen(t *testing.T) {
	for _, spacing := range []time.Duration{2 * time.Second, 3500 * time.Millisecond, 5 * time.Second, 7 * time.Second, 9 * time.Second} {
		t.Run(fmt.Sprint(spacing), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newR152Store()
				g, opened := r152Guard(s)
				if got := r152Run(g, "held"); got != "ran" {
					t.Fatalf("held: %s", got)
				}
				r152Align(100 * time.Millisecond)
				t0 := time.Now()
				fail := r152FailNext(s)
				var log []string
				for i := 0; time.Since(t0) < 12*time.Second || i < 3; i++ {
					r152SleepUntil(t0, time.Duration(i)*spacing+time.Duration(i)*10*time.Millisecond)
					fail.Store(1)
					k := fmt.Sprintf("k%d", i)
					a := r152Run(g, k)
					time.Sleep(100 * time.Millisecond)
					b := r152Run(g, k) // the retry
					log = append(log, fmt.Sprintf("t=%v %s/%s", time.Since(t0).Round(10*time.Millisecond), a, b))
				}
				held := r152Run(g, "held")
				t.Logf("%v held=%s opened=%d", log, held, opened.Load())
				if opened.Load() != 0 || held != "replayed" {
					t.Errorf("single blips %v apart, each retried at once, failed a healthy guard open (opened %d; a key the store holds: %s)", spacing, opened.Load(), held)
				}
				time.Sleep(5 * time.Second)
			})
		})
	}
}

// A blip during a probe: a request fails, the chain's probe fails too,
// the next probe gets through; and again ten seconds later. Requests every
// 3 s otherwise answered.
func TestReview152BlipDuringAProbeDoesNotFailOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newR152Store()
		g, opened := r152Guard(s)
		if got := r152Run(g, "held"); got != "ran" {
			t.Fatalf("held: %s", got)
		}
		t0 := time.Now()
		fail := r152FailNext(s)
		for i := 0; time.Since(t0) < 40*time.Second; i++ {
			if i%3 == 0 {
				fail.Store(2) // the request's claim and the next probe
			}
			r152Run(g, fmt.Sprintf("k%d", i))
			time.Sleep(3 * time.Second)
		}
		if got := r152Run(g, "held"); opened.Load() != 0 || got != "replayed" {
			t.Errorf("blips during probes failed a healthy guard open: opened %d, held %s", opened.Load(), got)
		}
		time.Sleep(5 * time.Second)
	})
}

// A single slow call (StoreTimeout) on a busy healthy guard.
func TestReview152OneSlowCallDoesNotFailOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newR152Store()
		g, opened := r152Guard(s)
		r152Run(g, "held")
		var hang atomic.Int64
		s.setBegin(func(string) int {
			if hang.Add(-1) >= 0 {
				return r152Hang
			}
			return r152OK
		})
		t0 := time.Now()
		for i := 0; time.Since(t0) < 30*time.Second; i++ {
			if i%100 == 50 {
				hang.Store(1)
			}
			r152Run(g, fmt.Sprintf("k%d", i))
			time.Sleep(100 * time.Millisecond)
		}
		if got := r152Run(g, "held"); opened.Load() != 0 || got != "replayed" {
			t.Errorf("one slow call every 10 s failed a healthy guard open: opened %d, held %s", opened.Load(), got)
		}
		time.Sleep(5 * time.Second)
	})
}
