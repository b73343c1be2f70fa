package breaker_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// r140Store is a store whose fleet stays in the state set, that fails
// while fail is set and hangs (until its ctx ends) while hang is set.
type r140Store struct {
	mu    sync.Mutex
	st    resilience.State
	gen   uint64
	fail  bool
	hang  bool
	delay time.Duration
	syncs int
}

func (s *r140Store) Sync(ctx context.Context, name string, y breaker.Sync) (breaker.Fleet, error) {
	s.mu.Lock()
	s.syncs++
	fail, hang, delay := s.fail, s.hang, s.delay
	f := breaker.Fleet{State: s.st, Generation: s.gen}
	s.mu.Unlock()
	if hang {
		<-ctx.Done()
		return breaker.Fleet{}, ctx.Err()
	}
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return breaker.Fleet{}, ctx.Err()
		}
	}
	if fail {
		return breaker.Fleet{}, errors.New("store down")
	}
	return f, nil
}

func (s *r140Store) set(fn func(s *r140Store)) {
	s.mu.Lock()
	fn(s)
	s.mu.Unlock()
}

var r140Dead = errors.New("dependency failed")

// A run of failures that began in a bucket the window has since dropped
// keeps only its failures still in it (ConsecutiveFailures' doc). A shared
// replica going alone moves the run into the current bucket: it lives a
// window longer, and a lone failure 15 s after four others (10 s window)
// opens it, where a local breaker fed the same calls stays closed.
func TestReview140ForgetKeepsARunPastTheWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &r140Store{}
		opts := []breaker.Option{breaker.ConsecutiveFailures(5), breaker.FailureRate(0.9, 100), breaker.Window(10*time.Second, 10)}
		shared := breaker.New("r140-run", append(opts, breaker.Shared(store))...)
		defer shared.Close()
		local := breaker.New("r140-run-local", opts...)
		ctx := context.Background()
		fail := func(context.Context) error { return r140Dead }
		time.Sleep(time.Millisecond)
		for range 4 {
			_ = shared.Execute(ctx, fail)
			_ = local.Execute(ctx, fail)
		}
		time.Sleep(9500 * time.Millisecond)
		store.set(func(s *r140Store) { s.fail = true }) // the replica goes alone (its flush fails)
		time.Sleep(5500 * time.Millisecond)
		_ = shared.Execute(ctx, fail)
		_ = local.Execute(ctx, fail)
		if got, want := shared.State(), local.State(); got != want {
			t.Errorf("after 4 failures at 0 s and one at 15 s (window 10 s, 5 in a row): shared replica alone %v, local breaker %v; counts shared %+v local %+v",
				got, want, shared.Counts(), local.Counts())
		}
	})
}

// A replica cut off from the dependency and from Redis at the same moment,
// FailureRate alone (ConsecutiveFailures off): a local breaker fed the
// same calls opens once the failures outweigh the successes still in its
// window; the replica alone keeps every success of its run for a whole
// window more, in one bucket, and sends the dead dependency more calls.
func TestReview140CutOffFromBothAtOnceOpensAsLocal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &r140Store{}
		opts := []breaker.Option{breaker.ConsecutiveFailures(0), breaker.FailureRate(0.5, 10), breaker.Window(10*time.Second, 10)}
		shared := breaker.New("r140-both", append(opts, breaker.Shared(store))...)
		defer shared.Close()
		local := breaker.New("r140-both-local", opts...)
		ctx := context.Background()
		var dead atomic.Bool
		var sentShared, sentLocal int
		op := func(n *int) func(context.Context) error {
			return func(context.Context) error {
				if dead.Load() {
					*n++
					return r140Dead
				}
				return nil
			}
		}
		time.Sleep(time.Millisecond)
		for range 1000 { // 100 calls a second for 10 s, healthy
			_ = shared.Execute(ctx, op(&sentShared))
			_ = local.Execute(ctx, op(&sentLocal))
			time.Sleep(10 * time.Millisecond)
		}
		store.set(func(s *r140Store) { s.fail = true })
		time.Sleep(200 * time.Millisecond) // its flush fails: alone; then the dependency dies
		dead.Store(true)
		openShared, openLocal := -1, -1
		for range 3000 { // 30 s at 100 a second
			if err := shared.Execute(ctx, op(&sentShared)); breaker.IsRejection(err) && openShared < 0 {
				openShared = sentShared
			}
			if err := local.Execute(ctx, op(&sentLocal)); breaker.IsRejection(err) && openLocal < 0 {
				openLocal = sentLocal
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Logf("calls sent to the dead dependency before the first refusal: shared replica alone %d, local breaker %d", openShared, openLocal)
		if openShared < 0 || openShared > openLocal+openLocal/4 {
			t.Errorf("a replica alone sent %d calls to the dead dependency before it opened, a local breaker %d", openShared, openLocal)
		}
	})
}

// Redis flapping (each flush fails or not in turn) while the dependency
// fails 60% of calls, the fleet's counts never reaching it (a store
// that takes nothing): a replica alone half the time must still open,
// as a local breaker does.
func TestReview140FlappingStoreSixtyPercent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &r140Store{}
		opts := []breaker.Option{breaker.ConsecutiveFailures(0), breaker.FailureRate(0.5, 20), breaker.Window(10*time.Second, 10)}
		shared := breaker.New("r140-flap", append(opts, breaker.Shared(store))...)
		defer shared.Close()
		local := breaker.New("r140-flap-local", opts...)
		ctx := context.Background()
		i := 0
		op := func(context.Context) error {
			i++
			if i%5 < 3 {
				return r140Dead
			}
			return nil
		}
		stop := make(chan struct{})
		go func() { // flap at each flush
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				case <-time.After(100 * time.Millisecond):
				}
				store.set(func(s *r140Store) { s.fail = k%2 == 0 })
			}
		}()
		openedShared, openedLocal := -1, -1
		for n := range 2000 { // 20 s at 100 a second
			if err := shared.Execute(ctx, op); breaker.IsRejection(err) && openedShared < 0 {
				openedShared = n
			}
			if err := local.Execute(ctx, op); breaker.IsRejection(err) && openedLocal < 0 {
				openedLocal = n
			}
			time.Sleep(10 * time.Millisecond)
		}
		close(stop)
		t.Logf("first refusal: shared %d, local %d", openedShared, openedLocal)
		if openedShared < 0 {
			t.Errorf("a replica alone every other flush never opened on a dependency failing 60%% (local opened at call %d)", openedLocal)
		}
	})
}

// A new replica's first call waits for its hello a tenth of the flush
// interval at most; a call whose own deadline is shorter than that, to a
// healthy dependency, must not fail for the store's slowness: a plain
// client would have completed it.
func TestReview140HelloFailsAShortDeadlineCall(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(*r140Store)
	}{
		{"hanging store", func(s *r140Store) { s.hang = true }},
		{"slow store 20ms", func(s *r140Store) { s.delay = 20 * time.Millisecond }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store := &r140Store{}
				store.set(tc.set)
				b := breaker.New("r140-hello", breaker.FailureRate(0.5, 10), breaker.Window(10*time.Second, 10), breaker.Shared(store))
				defer b.Close()
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
				defer cancel()
				ran := false
				err := b.Execute(ctx, func(context.Context) error { ran = true; return nil })
				if err != nil || !ran {
					t.Errorf("a 5 ms call to a healthy dependency on a new shared breaker: err %v, op called %v (a plain client completes it)", err, ran)
				}
			})
		})
	}
}

// Calls never wait more than FlushInterval/10 at start, and never after:
// a burst of calls at start against a hanging store, then more.
func TestReview140HelloWaitBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &r140Store{hang: true}
		b := breaker.New("r140-wait", breaker.FailureRate(0.5, 10), breaker.Window(10*time.Second, 10), breaker.Shared(store))
		defer b.Close()
		var wg sync.WaitGroup
		var worst atomic.Int64
		for k := range 50 {
			wg.Go(func() {
				time.Sleep(time.Duration(k) * time.Millisecond / 5)
				start := time.Now()
				_ = b.Execute(context.Background(), func(context.Context) error { return nil })
				if d := int64(time.Since(start)); d > worst.Load() {
					worst.Store(d)
				}
			})
		}
		wg.Wait()
		if w := time.Duration(worst.Load()); w > 10*time.Millisecond {
			t.Errorf("a call waited %v at start (bound 10 ms)", w)
		}
		start := time.Now()
		_ = b.Execute(context.Background(), func(context.Context) error { return nil })
		if d := time.Since(start); d > 0 {
			t.Errorf("a call after the first waited %v", d)
		}
	})
}

// A replica made while the fleet is open refuses its first calls.
func TestReview140NewReplicaRefusesAtOpenFleet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &r140Store{st: resilience.StateOpen, gen: 7, delay: 2 * time.Millisecond}
		b := breaker.New("r140-open", breaker.FailureRate(0.5, 10), breaker.Window(10*time.Second, 10), breaker.Shared(store))
		defer b.Close()
		sent := 0
		for range 16 {
			_ = b.Execute(context.Background(), func(context.Context) error { sent++; return nil })
			time.Sleep(5 * time.Millisecond)
		}
		if sent > 0 {
			t.Errorf("%d calls sent while the fleet is open", sent)
		}
	})
}

// A breaker made and closed at once, many at once: no goroutine left (the
// package's goleak), Close within two intervals.
func TestReview140MadeAndClosedAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &r140Store{hang: true}
		var wg sync.WaitGroup
		for range 20 {
			wg.Go(func() {
				b := breaker.New("r140-close", breaker.FailureRate(0.5, 10), breaker.Window(10*time.Second, 10), breaker.Shared(store))
				start := time.Now()
				_ = b.Close()
				if d := time.Since(start); d > 200*time.Millisecond {
					t.Errorf("Close took %v", d)
				}
			})
		}
		wg.Wait()
	})
}

// r140Probes is a half-open fleet granting one probe, to one replica at a
// time, unused grants expiring after three flush intervals; a probe's
// success closes it. Each Sync takes delay.
type r140Probes struct {
	mu        sync.Mutex
	st        resilience.State
	gen       uint64
	holder    string
	grantedAt time.Time
	delay     time.Duration
}

func (s *r140Probes) Sync(ctx context.Context, name string, y breaker.Sync) (breaker.Fleet, error) {
	select {
	case <-time.After(s.delay):
	case <-ctx.Done():
		return breaker.Fleet{}, ctx.Err()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if y.Generation == s.gen && y.ProbeSuccesses > 0 && s.st == resilience.StateHalfOpen {
		s.st, s.gen, s.holder = resilience.StateClosed, s.gen+1, ""
	}
	f := breaker.Fleet{State: s.st, Generation: s.gen}
	if s.st != resilience.StateHalfOpen {
		return f, nil
	}
	if s.holder != "" && time.Since(s.grantedAt) > 3*y.Policy.FlushInterval && s.holder != "" {
		s.holder = "" // unused, expired
	}
	if s.holder == y.Replica && !y.WantProbe && !y.ProbeHeld && !y.ProbeRunning {
		s.holder = "" // given up
	}
	switch {
	case s.holder == y.Replica:
		f.ProbeGranted = true
	case s.holder == "" && y.WantProbe:
		s.holder, s.grantedAt = y.Replica, time.Now()
		f.ProbeGranted = true
	}
	return f, nil
}

// Rare calls at a half-open fleet, each with a deadline shorter than the
// store's round trip, to a dependency that is back: each kicks a flush and
// gives up before its answer. Does the fleet ever close, and does any call
// complete?
func TestReview140RareShortDeadlineCallsAtHalfOpenFleet(t *testing.T) {
	t.Skip("known limit (docs/shared-breaker.md, Half-open): rare calls with less time than the store's round trip never get the fleet's probe")
	synctest.Test(t, func(t *testing.T) {
		store := &r140Probes{st: resilience.StateHalfOpen, gen: 3, delay: 10 * time.Millisecond}
		b := breaker.New("r140-rare", breaker.FailureRate(0.5, 10), breaker.Window(10*time.Second, 10), breaker.Shared(store))
		defer b.Close()
		time.Sleep(50 * time.Millisecond)
		ok := 0
		var errs []error
		for range 30 {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
			err := b.Execute(ctx, func(context.Context) error { return nil })
			cancel()
			if err == nil {
				ok++
			} else if len(errs) < 3 {
				errs = append(errs, err)
			}
			time.Sleep(300 * time.Millisecond)
		}
		if ok == 0 {
			t.Errorf("30 calls, one each 300 ms, 5 ms deadline, store round trip 10 ms, dependency back: none completed, fleet %v; errors %v", b.FleetState(), errs)
		}
	})
}

// Two replicas calling in turn, rarely, at a half-open fleet, the first's
// calls giving up while they wait: the second must get the probe.
func TestReview140TwoReplicasAlternateShortDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &r140Probes{st: resilience.StateHalfOpen, gen: 3, delay: 10 * time.Millisecond}
		a := breaker.New("r140-alt", breaker.FailureRate(0.5, 10), breaker.Window(10*time.Second, 10), breaker.Shared(store))
		defer a.Close()
		bb := breaker.New("r140-alt", breaker.FailureRate(0.5, 10), breaker.Window(10*time.Second, 10), breaker.Shared(store))
		defer bb.Close()
		time.Sleep(50 * time.Millisecond)
		okB := 0
		for range 20 {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
			_ = a.Execute(ctx, func(context.Context) error { return nil })
			cancel()
			time.Sleep(150 * time.Millisecond)
			if err := bb.Execute(context.Background(), func(context.Context) error { return nil }); err == nil {
				okB++
			}
			time.Sleep(150 * time.Millisecond)
		}
		if okB == 0 {
			t.Errorf("replica B, patient, alternating with A whose calls give up: none of 20 completed, fleet %v", bb.FleetState())
		}
	})
}
