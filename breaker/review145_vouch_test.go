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

// r145Script is a scripted store: Sync answers what the test sets (or
// fails), and Watch hands the test its changed callback.
type r145Script struct {
	mu      sync.Mutex
	answer  breaker.Fleet
	fail    bool
	changed func(breaker.Fleet)
	syncs   []breaker.Sync
}

func (s *r145Script) set(f breaker.Fleet, fail bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.answer, s.fail = f, fail
}

func (s *r145Script) Sync(ctx context.Context, name string, in breaker.Sync) (breaker.Fleet, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.syncs = append(s.syncs, in)
	if s.fail {
		return breaker.Fleet{}, errors.New("store down")
	}
	a := s.answer
	a.ProbeGranted = false
	return a, nil
}

func (s *r145Script) Watch(ctx context.Context, name string, changed func(breaker.Fleet)) error {
	s.mu.Lock()
	s.changed = changed
	s.mu.Unlock()
	<-ctx.Done()
	return ctx.Err()
}

func (s *r145Script) publish(f breaker.Fleet) {
	s.mu.Lock()
	c := s.changed
	s.mu.Unlock()
	c(f)
}

// A replica vouches only for the opening it outlived: "keeps deciding
// alone when the store answers again still holding the same opening
// (same generation)". Here the opening it outlived (generation 2) ended
// while its flushes failed, and the watcher told it of a new one
// (generation 3: another replica's probe failed), which it then went by,
// rejecting calls. When its flushes reach the store again, still in
// generation 3, it has outlived nothing of that opening: it must go by it.
func TestReview145NoVouchForAnOpeningHeardFromTheWatcher(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &r145Script{answer: breaker.Fleet{State: resilience.StateClosed, Generation: 1}}
		b := breaker.New("dep", breaker.Shared(s), breaker.FailureRate(0.5, 10), breaker.Window(10*time.Second, 10),
			breaker.OpenTimeout(time.Second), breaker.FlushInterval(100*time.Millisecond))
		defer b.Close()
		ok := func(context.Context) error { return nil }
		time.Sleep(150 * time.Millisecond)
		// The fleet opens (generation 2).
		s.set(breaker.Fleet{State: resilience.StateOpen, Generation: 2}, false)
		time.Sleep(150 * time.Millisecond)
		if st := b.FleetState(); st != resilience.StateOpen {
			t.Fatalf("fleet state %v, want open", st)
		}
		// The store fails; after the staleness bound the replica decides
		// alone, and its calls succeed.
		s.set(breaker.Fleet{}, true)
		time.Sleep(1200 * time.Millisecond)
		for range 20 {
			if err := b.Execute(context.Background(), ok); err != nil {
				t.Fatalf("alone: %v", err)
			}
			time.Sleep(10 * time.Millisecond)
		}
		// The watcher hears a new opening, generation 3 (the fleet went
		// half-open, another replica's probe failed), while flushes still
		// fail: the replica goes by it.
		s.publish(breaker.Fleet{State: resilience.StateOpen, Generation: 3})
		if st := b.FleetState(); st != resilience.StateOpen {
			t.Fatalf("after the watcher's opening: fleet state %v, want open", st)
		}
		if err := b.Execute(context.Background(), ok); !errors.Is(err, breaker.ErrOpen) {
			t.Fatalf("after the watcher's opening: call not rejected: %v", err)
		}
		// The store answers again, in generation 3.
		s.set(breaker.Fleet{State: resilience.StateOpen, Generation: 3}, false)
		time.Sleep(250 * time.Millisecond)
		if st := b.FleetState(); st != resilience.StateOpen {
			t.Errorf("the replica vouches for generation 3, an opening it never outlived: FleetState %v", st)
		}
		let := 0
		for range 50 {
			if b.Execute(context.Background(), ok) == nil {
				let++
			}
		}
		if let > 0 {
			t.Errorf("%d of 50 calls let through in an opening of the fleet's this replica heard and never outlived", let)
		}
	})
}
