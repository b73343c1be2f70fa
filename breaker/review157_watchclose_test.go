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

// review157Store is a scripted store: answer decides each Sync's answer;
// every Sync is recorded.
type review157Store struct {
	mu      sync.Mutex
	answer  func(s breaker.Sync) (breaker.Fleet, error)
	syncs   []breaker.Sync
	changed func(breaker.Fleet)
}

func (s *review157Store) Sync(ctx context.Context, name string, y breaker.Sync) (breaker.Fleet, error) {
	s.mu.Lock()
	s.syncs = append(s.syncs, y)
	a := s.answer
	s.mu.Unlock()
	return a(y)
}

func (s *review157Store) Watch(ctx context.Context, name string, changed func(breaker.Fleet)) error {
	s.mu.Lock()
	s.changed = changed
	s.mu.Unlock()
	<-ctx.Done()
	return ctx.Err()
}

func (s *review157Store) set(a func(breaker.Sync) (breaker.Fleet, error)) {
	s.mu.Lock()
	s.answer = a
	s.mu.Unlock()
}

func (s *review157Store) publish(f breaker.Fleet) {
	s.mu.Lock()
	c := s.changed
	s.mu.Unlock()
	c(f)
}

func fixed(f breaker.Fleet) func(breaker.Sync) (breaker.Fleet, error) {
	return func(breaker.Sync) (breaker.Fleet, error) { return f, nil }
}

// review157Vouching brings a replica to vouch for the dependency in the
// fleet's half-open generation 10 (ownProbes = 1), at about t=400ms of
// the bubble, flushes every 100ms.
func review157Vouching(t *testing.T, st *review157Store) *breaker.Breaker {
	st.set(fixed(breaker.Fleet{State: resilience.StateOpen, Generation: 10, ChangedFor: time.Millisecond}))
	b := breaker.New("dep",
		breaker.FailureRate(0.5, 1), breaker.Window(10*time.Second, 10),
		breaker.OpenTimeout(200*time.Millisecond), breaker.HalfOpenRequests(1),
		breaker.FlushInterval(100*time.Millisecond), breaker.Shared(st))
	time.Sleep(50 * time.Millisecond) // t=50: heard open gen 10
	st.set(func(breaker.Sync) (breaker.Fleet, error) { return breaker.Fleet{}, errors.New("store down") })
	time.Sleep(320 * time.Millisecond) // t=370: the opening unconfirmed for 300ms+: alone
	if err := b.Execute(context.Background(), func(context.Context) error { return nil }); err != nil {
		t.Fatalf("a call while alone: %v", err)
	}
	st.set(fixed(breaker.Fleet{State: resilience.StateHalfOpen, Generation: 10, ChangedFor: 350 * time.Millisecond}))
	time.Sleep(50 * time.Millisecond) // t=420: flush at 400 rejoined, the opening stale for it: vouches
	if got := b.FleetState(); got != resilience.StateClosed {
		t.Fatalf("FleetState after rejoining = %v, want closed (vouching)", got)
	}
	return b
}

// A vouching replica's probe succeeds; the fleet is closed (by another
// replica's probe, or by its own flush whose answer was lost) and the
// replica hears it by Watch, between its flushes. Its calls after its
// probe, failures, are held, then kept "for the flush's answer"; the
// promise: they count in the closed generation (11), not sent under the
// half-open one (10), which a store drops.
func TestReview157WatchClosingBetweenFlushesKeepsHeldCounts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &review157Store{}
		b := review157Vouching(t, st)
		defer b.Close()
		boom := errors.New("boom")
		// t=420: the probe (its own), a success.
		if err := b.Execute(context.Background(), func(context.Context) error { return nil }); err != nil {
			t.Fatalf("probe: %v", err)
		}
		// The fleet closes, heard by Watch at t=430; the store's answers say so from now on.
		closed := breaker.Fleet{State: resilience.StateClosed, Generation: 11, Previous: 10, ChangedFor: time.Millisecond}
		st.set(fixed(closed))
		time.Sleep(10 * time.Millisecond)
		st.publish(breaker.Fleet{State: resilience.StateClosed, Generation: 11})
		// t=430..470: failures, after the probe.
		var calls uint64
		for range 4 {
			time.Sleep(10 * time.Millisecond)
			_ = b.Execute(context.Background(), func(context.Context) error { calls++; return boom })
		}
		time.Sleep(400 * time.Millisecond) // flushes at 500, 600, 700, 800
		st.mu.Lock()
		defer st.mu.Unlock()
		var in10, in11 uint64
		for _, y := range st.syncs {
			switch y.Generation {
			case 10:
				in10 += y.Requests
			case 11:
				in11 += y.Requests
			}
		}
		if calls == 0 || in11 != calls || in10 != 0 {
			t.Errorf("requests sent under generation 11: %d, under 10 (the half-open one, dropped by a store): %d; want %d and 0", in11, in10, calls)
			for _, y := range st.syncs {
				if y.Requests > 0 || y.ProbeSuccesses > 0 {
					t.Logf("sync gen %d state %v requests %d failures %d probeOK %d", y.Generation, y.State, y.Requests, y.Failures, y.ProbeSuccesses)
				}
			}
		}
	})
}

// Control: the closing comes in the flush's own answer (with Previous),
// Watch first within that flush: held counts land in generation 11.
func TestReview157WatchClosingDuringFlush(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &review157Store{}
		b := review157Vouching(t, st)
		defer b.Close()
		boom := errors.New("boom")
		if err := b.Execute(context.Background(), func(context.Context) error { return nil }); err != nil {
			t.Fatalf("probe: %v", err)
		}
		var calls uint64
		for range 4 {
			time.Sleep(10 * time.Millisecond)
			_ = b.Execute(context.Background(), func(context.Context) error { calls++; return boom })
		}
		closed := breaker.Fleet{State: resilience.StateClosed, Generation: 11, Previous: 10, ChangedFor: time.Millisecond}
		var once sync.Once
		st.set(func(y breaker.Sync) (breaker.Fleet, error) {
			once.Do(func() { st.publish(breaker.Fleet{State: resilience.StateClosed, Generation: 11}) })
			return closed, nil
		})
		time.Sleep(400 * time.Millisecond)
		st.mu.Lock()
		defer st.mu.Unlock()
		var in10, in11 uint64
		for _, y := range st.syncs {
			switch y.Generation {
			case 10:
				in10 += y.Requests
			case 11:
				in11 += y.Requests
			}
		}
		if calls == 0 || in11 != calls || in10 != 0 {
			t.Errorf("requests under 11: %d, under 10: %d; want %d and 0", in11, in10, calls)
		}
	})
}

// review157KeptThenAnswer: a vouching replica's probe succeeds, its held
// tally is kept as Watch hears a closing (gen 11), and the flushes' answers
// then say closed 11 with Previous prev (0: a store that does not say, as
// the doc allows; or another generation: Watch missed a change between).
// The promise: a tally kept "for the flush's answer" does not outlive it;
// calls made a second after the closing count in generation 11.
func review157KeptThenAnswer(t *testing.T, prev uint64) {
	synctest.Test(t, func(t *testing.T) {
		st := &review157Store{}
		b := review157Vouching(t, st)
		defer b.Close()
		if err := b.Execute(context.Background(), func(context.Context) error { return nil }); err != nil {
			t.Fatalf("probe: %v", err)
		}
		st.set(fixed(breaker.Fleet{State: resilience.StateClosed, Generation: 11, Previous: prev, ChangedFor: time.Millisecond}))
		time.Sleep(10 * time.Millisecond)
		st.publish(breaker.Fleet{State: resilience.StateClosed, Generation: 11})
		time.Sleep(time.Second) // ten flushes since
		st.mu.Lock()
		mark := len(st.syncs)
		st.mu.Unlock()
		var calls uint64
		for range 20 {
			time.Sleep(10 * time.Millisecond)
			_ = b.Execute(context.Background(), func(context.Context) error { calls++; return errors.New("boom") })
		}
		time.Sleep(500 * time.Millisecond)
		st.mu.Lock()
		defer st.mu.Unlock()
		var in11, other uint64
		for _, y := range st.syncs[mark:] {
			if y.Generation == 11 {
				in11 += y.Requests
			} else {
				other += y.Requests
			}
		}
		if calls == 0 || in11 != calls {
			t.Errorf("Previous %d: of %d calls run 1 s after the closing, %d sent under generation 11, %d under another (dropped by a store)", prev, calls, in11, other)
		}
	})
}

func TestReview157KeptTallyPreviousUnknown(t *testing.T) { review157KeptThenAnswer(t, 0) }
func TestReview157KeptTallyPreviousOther(t *testing.T)   { review157KeptThenAnswer(t, 9) }

// A vouching replica's probe flush fails for longer than the hold (three
// intervals: a Redis blip); then it gets through, and closes the fleet;
// Watch hears the closing as the flush runs (pub/sub, first), the answer
// says Previous 10, past the hold. The tally kept for that answer must not
// outlive it: the replica's calls a second later count in generation 11.
func TestReview157KeptTallyPastHold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &review157Store{}
		b := review157Vouching(t, st)
		defer b.Close()
		if err := b.Execute(context.Background(), func(context.Context) error { return nil }); err != nil {
			t.Fatalf("probe: %v", err)
		}
		st.set(func(breaker.Sync) (breaker.Fleet, error) { return breaker.Fleet{}, errors.New("blip") })
		time.Sleep(400 * time.Millisecond) // t=820: flushes at 500..800 failed, the hold (to 720) over
		closed := breaker.Fleet{State: resilience.StateClosed, Generation: 11, Previous: 10, ChangedFor: time.Millisecond}
		var once sync.Once
		st.set(func(y breaker.Sync) (breaker.Fleet, error) {
			once.Do(func() { st.publish(breaker.Fleet{State: resilience.StateClosed, Generation: 11}) })
			return closed, nil
		})
		time.Sleep(time.Second)
		st.mu.Lock()
		mark := len(st.syncs)
		st.mu.Unlock()
		var calls uint64
		for range 20 {
			time.Sleep(10 * time.Millisecond)
			_ = b.Execute(context.Background(), func(context.Context) error { calls++; return errors.New("boom") })
		}
		time.Sleep(500 * time.Millisecond)
		st.mu.Lock()
		defer st.mu.Unlock()
		var in11, other uint64
		for _, y := range st.syncs[mark:] {
			if y.Generation == 11 {
				in11 += y.Requests
			} else {
				other += y.Requests
			}
		}
		if calls == 0 || in11 != calls {
			t.Errorf("of %d calls run 1 s after the closing, %d sent under generation 11, %d under another (dropped by a store)", calls, in11, other)
		}
	})
}
