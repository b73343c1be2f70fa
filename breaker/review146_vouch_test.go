package breaker_test

// review146: a replica's "vouching" (fleet.vouched) on fake time, against a
// scripted store of the test's own: the test sets the fleet's state and
// generation, the store grants one probe at a time to a replica that wants
// one, closes on HalfOpenRequests successes (a new generation), reopens on
// a failure, and publishes changes to its watchers.

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/resilience"
)

type r146Fake struct {
	mu       sync.Mutex
	down     bool
	state    resilience.State
	gen      uint64
	prev     uint64 // the generation the last change ended (Fleet.Previous)
	ok       uint32
	hor      uint32
	holder   string
	watchers map[int]func(breaker.Fleet)
	next     int
	watch    bool
}

func (s *r146Fake) Sync(ctx context.Context, name string, sy breaker.Sync) (breaker.Fleet, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		return breaker.Fleet{}, errors.New("review146: store down")
	}
	if sy.Generation == s.gen && s.state != resilience.StateClosed {
		if s.holder == sy.Replica && (sy.ProbeSuccesses > 0 || sy.ProbeFailures > 0) {
			s.holder = ""
		}
		switch {
		case sy.ProbeFailures > 0:
			s.setLocked(resilience.StateOpen, true)
		case sy.ProbeSuccesses > 0:
			s.ok += sy.ProbeSuccesses
			if s.ok >= s.hor {
				s.setLocked(resilience.StateClosed, true)
			}
		}
	}
	granted := false
	if s.state == resilience.StateHalfOpen {
		switch {
		case s.holder == sy.Replica && (sy.ProbeRunning || sy.ProbeHeld || sy.WantProbe):
			granted = true
		case s.holder == sy.Replica:
			s.holder = ""
		case s.holder == "" && sy.WantProbe && s.ok < s.hor:
			s.holder, granted = sy.Replica, true
		}
	}
	return breaker.Fleet{State: s.state, Generation: s.gen, ProbeGranted: granted, Previous: s.prev}, nil
}

// setLocked moves the fleet to st: a new generation if it opens or closes
// (half-open is the same opening), published to the watchers.
func (s *r146Fake) setLocked(st resilience.State, newGen bool) {
	s.state = st
	if newGen {
		s.prev = s.gen
		s.gen++
		s.ok, s.holder = 0, ""
		for _, w := range s.watchers {
			w(breaker.Fleet{State: st, Generation: s.gen}) // no Previous, as the Redis store's Watch
		}
	}
}

func (s *r146Fake) set(st resilience.State, newGen bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setLocked(st, newGen)
}

func (s *r146Fake) setDown(d bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = d
}

func (s *r146Fake) snapshot() (resilience.State, uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state, s.gen
}

// r146Watching is r146Fake with pub/sub.
type r146Watching struct{ *r146Fake }

func (s r146Watching) Watch(ctx context.Context, name string, changed func(breaker.Fleet)) error {
	s.mu.Lock()
	id := s.next
	s.next++
	if s.watchers == nil {
		s.watchers = map[int]func(breaker.Fleet){}
	}
	s.watchers[id] = changed
	s.mu.Unlock()
	<-ctx.Done()
	s.mu.Lock()
	delete(s.watchers, id)
	s.mu.Unlock()
	return ctx.Err()
}

func r146New(store breaker.SharedStore) *breaker.Breaker {
	return breaker.New("dep", breaker.Shared(store), breaker.FailureRate(0.5, 10), breaker.Window(10*time.Second, 10),
		breaker.OpenTimeout(400*time.Millisecond), breaker.FlushInterval(100*time.Millisecond),
		breaker.HalfOpenRequests(1), breaker.ConsecutiveFailures(0))
}

func r146Ok(context.Context) error { return nil }

// r146Outlive runs the part common to the cases below: the fleet open in
// gen, heard by the replica (by a flush, or by pub/sub while its flushes
// fail), the store unanswering past the staleness bound, 30 successes
// alone, then the store back with the fleet half-open in the same
// generation. It returns the replica's FleetState after the rejoin flush.
func r146Outlive(t *testing.T, byWatch bool) (resilience.State, *breaker.Breaker, *r146Fake) {
	fake := &r146Fake{state: resilience.StateClosed, gen: 1, hor: 1}
	var store breaker.SharedStore = fake
	if byWatch {
		store = r146Watching{fake}
	}
	b := r146New(store)
	t.Cleanup(func() { _ = b.Close() })
	time.Sleep(250 * time.Millisecond)
	if byWatch {
		fake.setDown(true) // flushes fail while the fleet is closed
		time.Sleep(250 * time.Millisecond)
		fake.set(resilience.StateOpen, true) // heard by pub/sub
	} else {
		fake.set(resilience.StateOpen, true)
		time.Sleep(150 * time.Millisecond) // heard at a flush
		fake.setDown(true)
	}
	synctest.Wait()
	if st := b.FleetState(); st != resilience.StateOpen {
		t.Fatalf("setup: the replica did not hear the opening: %v", st)
	}
	time.Sleep(500 * time.Millisecond) // past max(OpenTimeout, 3 flushes) unconfirmed
	ok := 0
	for range 30 {
		if b.Execute(t.Context(), r146Ok) == nil {
			ok++
		}
		time.Sleep(5 * time.Millisecond)
	}
	if ok != 30 {
		t.Fatalf("setup: %d of 30 calls alone succeeded", ok)
	}
	fake.set(resilience.StateHalfOpen, false)
	fake.setDown(false)
	time.Sleep(150 * time.Millisecond) // the rejoin flush
	return b.FleetState(), b, fake
}

// Control: the opening heard at a flush, then the store gone: the replica
// vouches at the rejoin (the documented behaviour).
func TestReview146VouchesForAnOpeningHeardByAFlush(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st, _, _ := r146Outlive(t, false)
		if st != resilience.StateClosed {
			t.Errorf("FleetState after the rejoin %v, want closed (vouching)", st)
		}
	})
}

// The same opening heard by pub/sub while the replica's flushes already
// failed (it went "down" while the fleet was closed): every condition of
// the doc holds, but aloneIn is the generation it went down in.
func TestReview146VouchesForAnOpeningHeardByWatchWhileDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st, b, _ := r146Outlive(t, true)
		refused := 0
		for range 50 {
			if b.Execute(t.Context(), r146Ok) != nil {
				refused++
			}
			time.Sleep(2 * time.Millisecond)
		}
		if st != resilience.StateClosed || refused > 0 {
			t.Errorf("FleetState after the rejoin %v, want closed (vouching); %d of 50 healthy calls refused", st, refused)
		}
	})
}

// A vouching replica whose calls come less often than its flushes: it
// asks for the probe at the flush after each call, and the permit lapses a
// flush interval later, before its next call. The fleet must close.
func TestReview146VouchingWithRareCallsClosesTheFleet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st, b, fake := r146Outlive(t, false)
		if st != resilience.StateClosed {
			t.Fatalf("setup: not vouching: %v", st)
		}
		refused := 0
		for range 20 { // 20 calls, 400 ms apart: 8 s
			if b.Execute(t.Context(), r146Ok) != nil {
				refused++
			}
			time.Sleep(400 * time.Millisecond)
		}
		fst, _ := fake.snapshot()
		if refused > 0 || fst != resilience.StateClosed {
			t.Errorf("after 20 calls 400 ms apart (flushes 100 ms): fleet %v, %d refused", fst, refused)
		}
	})
}

// (1) several replicas, one vouching and one not: the fleet closes once,
// the non-vouching replica refused only until then, and each probe
// success reported once (the fake closes at HalfOpenRequests = 1, so a
// success reported for the generation after would show as ok > 0 there).
func TestReview146VouchingAndNotTogetherCloseOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st, a, fake := r146Outlive(t, false)
		if st != resilience.StateClosed {
			t.Fatalf("setup: not vouching: %v", st)
		}
		_, gen := fake.snapshot()
		c := r146New(fake)
		defer c.Close()
		time.Sleep(50 * time.Millisecond)
		var refusedA, refusedC int
		for range 200 {
			if a.Execute(t.Context(), r146Ok) != nil {
				refusedA++
			}
			if c.Execute(t.Context(), r146Ok) != nil {
				refusedC++
			}
			time.Sleep(5 * time.Millisecond)
		}
		fst, g := fake.snapshot()
		if refusedA > 0 || fst != resilience.StateClosed || g != gen+1 {
			t.Errorf("fleet %v gen %d (want closed %d); vouching replica refused %d", fst, g, gen+1, refusedA)
		}
		if refusedC > 60 { // half-open for a few flushes at most
			t.Errorf("the other replica refused %d of 200 (5 ms apart)", refusedC)
		}
	})
}

// (2) per-replica faults: a's dependency answers, b's does not (b cut off
// from it). Both decide alone through the same store outage; a vouches at
// the rejoin, b does not (no success). a must never be refused, and b must
// stay protected as a local breaker with FailureRate would keep it: about
// one call per OpenTimeout reaching its dependency.
func TestReview146PerReplicaFaultsWhileVouching(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := &r146Fake{state: resilience.StateClosed, gen: 1, hor: 1}
		a, b := r146New(fake), r146New(fake)
		defer a.Close()
		defer b.Close()
		bad := func(context.Context) error { return errors.New("review146: b cut off") }
		time.Sleep(250 * time.Millisecond)
		fake.set(resilience.StateOpen, true)
		time.Sleep(150 * time.Millisecond)
		fake.setDown(true)
		time.Sleep(500 * time.Millisecond)
		for range 30 {
			_ = a.Execute(t.Context(), r146Ok)
			_ = b.Execute(t.Context(), bad)
			time.Sleep(5 * time.Millisecond)
		}
		fake.set(resilience.StateHalfOpen, false)
		fake.setDown(false)
		time.Sleep(150 * time.Millisecond)
		var refusedA, reachedB int
		for range 600 { // 3 s
			if a.Execute(t.Context(), r146Ok) != nil {
				refusedA++
			}
			_ = b.Execute(t.Context(), func(ctx context.Context) error { reachedB++; return bad(ctx) })
			time.Sleep(5 * time.Millisecond)
		}
		fst, _ := fake.snapshot()
		t.Logf("fleet %v; a refused %d; b's calls reaching its dead dependency %d of 600", fst, refusedA, reachedB)
		if refusedA > 0 {
			t.Errorf("a (healthy, vouching) refused %d of 600", refusedA)
		}
		if reachedB > 12 { // 3 s / 400 ms + slack
			t.Errorf("b's dead dependency reached %d times in 3 s (OpenTimeout 400 ms)", reachedB)
		}
	})
}

// The rare-call case with the whole fleet vouching (every replica went
// alone through the same store outage and served the recovered
// dependency, review144's case): three replicas, each calling every 400 ms
// (the fleet every 133 ms), flushes 100 ms. The fleet must close, and
// sharing resume: once it has, a dependency failing for every replica
// opens the fleet.
func TestReview146WholeFleetVouchingRareCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := &r146Fake{state: resilience.StateClosed, gen: 1, hor: 1}
		rs := []*breaker.Breaker{r146New(fake), r146New(fake), r146New(fake)}
		for _, r := range rs {
			defer r.Close()
		}
		time.Sleep(250 * time.Millisecond)
		fake.set(resilience.StateOpen, true)
		time.Sleep(150 * time.Millisecond)
		fake.setDown(true)
		time.Sleep(500 * time.Millisecond)
		for range 5 {
			for _, r := range rs {
				_ = r.Execute(t.Context(), r146Ok)
			}
			time.Sleep(5 * time.Millisecond)
		}
		fake.set(resilience.StateHalfOpen, false)
		fake.setDown(false)
		time.Sleep(150 * time.Millisecond)
		for i, r := range rs {
			if st := r.FleetState(); st != resilience.StateClosed {
				t.Fatalf("setup: replica %d not vouching: %v", i, st)
			}
		}
		refused := 0
		for range 25 { // 10 s
			for _, r := range rs {
				if r.Execute(t.Context(), r146Ok) != nil {
					refused++
				}
				time.Sleep(400 * time.Millisecond / 3)
			}
		}
		fst, _ := fake.snapshot()
		if refused > 0 || fst != resilience.StateClosed {
			t.Errorf("whole fleet vouching, each replica calling every 400 ms for 10 s: fleet %v (store), %d calls refused", fst, refused)
		}
	})
}
