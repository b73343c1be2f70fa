package breaker_test

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

// fake147 is an in-memory SharedStore that honours ctx and answers what
// the test sets; it records every Sync.
type fake147 struct {
	mu     sync.Mutex
	fail   bool
	answer breaker.Fleet
	syncs  []breaker.Sync
}

func (s *fake147) Sync(ctx context.Context, name string, sy breaker.Sync) (breaker.Fleet, error) {
	if err := ctx.Err(); err != nil {
		return breaker.Fleet{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.syncs = append(s.syncs, sy)
	if s.fail {
		return breaker.Fleet{}, errors.New("store down")
	}
	return s.answer, nil
}

func (s *fake147) set(fail bool, st resilience.State, gen uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail = fail
	s.answer = breaker.Fleet{State: st, Generation: gen}
}

// probes returns the probe outcomes the replica reported for gen.
func (s *fake147) probes(gen uint64) (ok, bad uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := map[string]bool{}
	for _, sy := range s.syncs {
		if sy.Generation != gen || sy.Batch == "" || seen[sy.Batch] {
			continue
		}
		seen[sy.Batch] = true
		ok += sy.ProbeSuccesses
		bad += sy.ProbeFailures
	}
	return ok, bad
}

func new147(name string, st breaker.SharedStore, hor uint32) *breaker.Breaker {
	return breaker.New(name, breaker.Shared(st),
		breaker.FailureRate(0.5, 10), breaker.Window(10*time.Second, 10),
		breaker.OpenTimeout(time.Second), breaker.HalfOpenRequests(hor),
		breaker.FlushInterval(100*time.Millisecond))
}

// TestReview147VouchOnCallsAdmittedBeforeOpening: the doc promises a replica
// vouches against an opening only if "its own calls succeeded while it
// decided alone". Here the replica's store goes silent right after it heard
// the fleet open; it never decides alone (the opening is fresh, every call
// of its is rejected), but calls it admitted while the fleet was still
// closed end successfully during the store's silence. When the store
// answers again, still in the opening, the replica should go by it.
func TestReview147VouchOnCallsAdmittedBeforeOpening(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &fake147{}
		st.set(false, resilience.StateClosed, 4)
		b := new147("vouch-inflight", st, 3)
		defer b.Close()
		time.Sleep(time.Millisecond)
		synctest.Wait()

		// Three calls in flight, admitted while the fleet is closed.
		release := make(chan struct{})
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(func() {
				_ = b.Execute(context.Background(), func(context.Context) error { <-release; return nil })
			})
		}
		synctest.Wait()

		// Another replica opens the fleet: this one hears it at its next flush.
		st.set(false, resilience.StateOpen, 5)
		time.Sleep(120 * time.Millisecond)
		if got := b.FleetState(); got != resilience.StateOpen {
			t.Fatalf("FleetState %v after the store said open", got)
		}
		// The store goes silent for one flush.
		st.set(true, resilience.StateOpen, 5)
		time.Sleep(100 * time.Millisecond)
		// The calls admitted before the opening end well meanwhile.
		close(release)
		wg.Wait()
		// Every call made now is rejected: the opening is fresh.
		if err := b.Execute(context.Background(), func(context.Context) error { return nil }); !breaker.IsRejection(err) {
			t.Fatalf("a call during the silence was not rejected: %v", err)
		}
		// The store answers again, the fleet still in the same opening.
		st.set(false, resilience.StateOpen, 5)
		time.Sleep(100 * time.Millisecond)

		sent := 0
		for range 20 {
			if err := b.Execute(context.Background(), func(context.Context) error { return errors.New("dependency down") }); !breaker.IsRejection(err) {
				sent++
			}
		}
		if got := b.FleetState(); got != resilience.StateOpen || sent > 0 {
			t.Errorf("the replica never decided alone after the opening, yet vouched on calls admitted before it: FleetState %v, %d of 20 calls sent to a dependency the fleet holds open", got, sent)
		}
	})
}

// TestReview147OwnProbesFirstOnly: the doc promises that the outcomes of a
// vouching replica's first HalfOpenRequests calls of the fleet's half-open
// state are the fleet's probes. Count what it reports for the half-open
// generation while the store stays half-open (it counts them elsewhere).
func TestReview147OwnProbesFirstOnly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &fake147{}
		st.set(false, resilience.StateOpen, 5)
		b := new147("vouch-refill", st, 3)
		defer b.Close()
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if got := b.FleetState(); got != resilience.StateOpen {
			t.Fatalf("FleetState %v", got)
		}
		st.set(true, resilience.StateOpen, 5)
		time.Sleep(1200 * time.Millisecond) // unconfirmed: decides alone
		for range 5 {
			if err := b.Execute(context.Background(), func(context.Context) error { return nil }); err != nil {
				t.Fatalf("call while alone: %v", err)
			}
		}
		st.set(false, resilience.StateHalfOpen, 5)
		time.Sleep(100 * time.Millisecond)
		if got := b.FleetState(); got != resilience.StateClosed {
			t.Fatalf("not vouching: FleetState %v", got)
		}
		for range 6 { // two calls per flush interval, six intervals
			for range 2 {
				_ = b.Execute(context.Background(), func(context.Context) error { return nil })
			}
			time.Sleep(100 * time.Millisecond)
		}
		ok, bad := st.probes(5)
		if ok+bad > 3 {
			t.Errorf("the vouching replica reported %d probe outcomes (%d ok, %d bad) for the half-open generation, more than its first HalfOpenRequests (3)", ok+bad, ok, bad)
		}
	})
}

// watch147 is fake147 with a Watch the test feeds.
type watch147 struct {
	fake147
	ch chan breaker.Fleet
}

func (s *watch147) Watch(ctx context.Context, name string, changed func(breaker.Fleet)) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case f := <-s.ch:
			changed(f)
		}
	}
}

// TestReview147LateWatchMessageStopsVouch: a change the watcher delivers
// late (an older generation than a flush already told) is "heard already"
// and should change nothing; here it arrives while the flushes fail, and
// the replica, whose own calls then succeed while it decides alone in the
// opening it last heard (generation 5), no longer vouches when the store
// answers again with that opening: it refuses the calls of a dependency
// that answers (the review144 symptom).
func TestReview147LateWatchMessageStopsVouch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &watch147{ch: make(chan breaker.Fleet, 4)}
		st.set(false, resilience.StateOpen, 5)
		b := new147("late-watch", st, 3)
		defer b.Close()
		time.Sleep(time.Millisecond)
		synctest.Wait()
		st.set(true, resilience.StateOpen, 5)
		time.Sleep(150 * time.Millisecond)                                 // a flush fails
		st.ch <- breaker.Fleet{State: resilience.StateOpen, Generation: 4} // late
		synctest.Wait()
		time.Sleep(1200 * time.Millisecond) // unconfirmed: decides alone
		for range 5 {
			if err := b.Execute(context.Background(), func(context.Context) error { return nil }); err != nil {
				t.Fatalf("call while alone: %v", err)
			}
		}
		st.set(false, resilience.StateHalfOpen, 5)
		time.Sleep(100 * time.Millisecond)
		refused := 0
		for range 20 {
			if err := b.Execute(context.Background(), func(context.Context) error { return nil }); breaker.IsRejection(err) {
				refused++
			}
		}
		if refused > 0 {
			t.Errorf("after a late watch message of generation 4, %d of 20 calls to a dependency that answered the replica alone in generation 5 were refused (FleetState %v)", refused, b.FleetState())
		}
	})
}

// TestReview147VouchTwiceControl: the same without the late message:
// the replica vouches (control for the test above).
func TestReview147VouchTwiceControl(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &watch147{ch: make(chan breaker.Fleet, 4)}
		st.set(false, resilience.StateOpen, 5)
		b := new147("late-watch-ctl", st, 3)
		defer b.Close()
		time.Sleep(time.Millisecond)
		synctest.Wait()
		st.set(true, resilience.StateOpen, 5)
		time.Sleep(150 * time.Millisecond)
		time.Sleep(1200 * time.Millisecond)
		for range 5 {
			_ = b.Execute(context.Background(), func(context.Context) error { return nil })
		}
		st.set(false, resilience.StateHalfOpen, 5)
		time.Sleep(100 * time.Millisecond)
		refused := 0
		for range 20 {
			if err := b.Execute(context.Background(), func(context.Context) error { return nil }); breaker.IsRejection(err) {
				refused++
			}
		}
		if refused > 0 {
			t.Errorf("control: %d of 20 refused", refused)
		}
	})
}

func (s *fake147) last() breaker.Sync {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.syncs[len(s.syncs)-1]
}

// TestReview147VouchThenOwnOpen: a replica vouches (its own breaker closed,
// its own calls succeeded alone), then its own calls fail and its own
// breaker opens. It no longer has a success to vouch with: it should not
// keep telling the store the fleet is closed (a store restarted empty that
// hears from it first restores the fleet closed) nor say so in FleetState.
func TestReview147VouchThenOwnOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &fake147{}
		st.set(false, resilience.StateOpen, 5)
		b := new147("vouch-own-open", st, 3)
		defer b.Close()
		time.Sleep(time.Millisecond)
		synctest.Wait()
		st.set(true, resilience.StateOpen, 5)
		time.Sleep(1200 * time.Millisecond) // unconfirmed: decides alone
		for range 5 {
			_ = b.Execute(context.Background(), func(context.Context) error { return nil })
		}
		st.set(false, resilience.StateOpen, 5) // still the same opening
		time.Sleep(100 * time.Millisecond)
		if got := b.FleetState(); got != resilience.StateClosed {
			t.Fatalf("not vouching: FleetState %v", got)
		}
		for range 12 {
			_ = b.Execute(context.Background(), func(context.Context) error { return errors.New("down") })
		}
		if got := b.State(); got != resilience.StateOpen {
			t.Fatalf("own breaker %v after 12 failures", got)
		}
		time.Sleep(100 * time.Millisecond)
		if got, sent := b.FleetState(), st.last().State; got == resilience.StateClosed || sent == resilience.StateClosed {
			t.Errorf("own breaker open, yet the replica still vouches: FleetState %v, tells the store %v", got, sent)
		}
	})
}
