package breaker_test

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// r144Store is a programmable shared store: each method runs its hook if
// set, else answers a closed fleet of generation 1.
type r144Store struct {
	syncs, forces, forceds, restores, reads, watches atomic.Int64

	sync    func(n int64, ctx context.Context, s breaker.Sync) (breaker.Fleet, error)
	watch   func(n int64, ctx context.Context, changed func(breaker.Fleet)) error
	force   func(n int64, ctx context.Context, f breaker.Forcing) error
	forced  func(n int64, ctx context.Context) (breaker.Forcing, uint64, error)
	restore func(n int64, ctx context.Context) error
	read    func(n int64, ctx context.Context) (breaker.FleetStatus, error)

	mu      sync.Mutex
	mode    breaker.Forcing
	version uint64
}

func (s *r144Store) Sync(ctx context.Context, name string, sy breaker.Sync) (breaker.Fleet, error) {
	n := s.syncs.Add(1)
	if s.sync != nil {
		return s.sync(n, ctx, sy)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return breaker.Fleet{State: resilience.StateClosed, Generation: 1, ForceVersion: s.version}, nil
}

func (s *r144Store) Watch(ctx context.Context, name string, changed func(breaker.Fleet)) error {
	n := s.watches.Add(1)
	if s.watch != nil {
		return s.watch(n, ctx, changed)
	}
	<-ctx.Done()
	return ctx.Err()
}

func (s *r144Store) Force(ctx context.Context, name string, f breaker.Forcing, after uint64) error {
	n := s.forces.Add(1)
	if s.force != nil {
		if err := s.force(n, ctx, f); err != nil {
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.version = max(s.version+1, after+1)
	s.mode = f
	return nil
}

func (s *r144Store) Restore(ctx context.Context, name string, f breaker.Forcing, version uint64) error {
	n := s.restores.Add(1)
	if s.restore != nil {
		return s.restore(n, ctx)
	}
	return nil
}

func (s *r144Store) Forced(ctx context.Context, name string) (breaker.Forcing, uint64, error) {
	n := s.forceds.Add(1)
	if s.forced != nil {
		return s.forced(n, ctx)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mode, s.version, nil
}

func (s *r144Store) Read(ctx context.Context, name string, p breaker.FleetPolicy) (breaker.FleetStatus, error) {
	n := s.reads.Add(1)
	if s.read != nil {
		return s.read(n, ctx)
	}
	return breaker.FleetStatus{}, nil
}

func (s *r144Store) current() breaker.Forcing {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mode
}

const r144Every = 100 * time.Millisecond

func r144New(st breaker.SharedStore, opts ...breaker.Option) *breaker.Breaker {
	o := append([]breaker.Option{breaker.Shared(st), breaker.FlushInterval(r144Every),
		breaker.FailureRate(0.5, 10), breaker.Window(time.Second, 10), breaker.OpenTimeout(200 * time.Millisecond)}, opts...)
	return breaker.New("r144", o...)
}

func r144OK(context.Context) error { return nil }

// Promise 3: a runtime.Goexit in Sync is a store fault like a panic: the
// replica goes on flushing and rejoins once the store works.
func TestReview144GoexitInSyncStopsFlusher(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &r144Store{}
		st.sync = func(n int64, ctx context.Context, s breaker.Sync) (breaker.Fleet, error) {
			if n == 2 {
				runtime.Goexit()
			}
			return breaker.Fleet{State: resilience.StateClosed, Generation: 1}, nil
		}
		b := r144New(st)
		defer b.Close()
		for range 20 {
			_ = b.Execute(t.Context(), r144OK)
			time.Sleep(r144Every)
		}
		synctest.Wait()
		if n := st.syncs.Load(); n < 10 {
			t.Fatalf("after a Goexit in one Sync the flusher made %d Syncs in 20 intervals: sharing never resumes", n)
		}
	})
}

// Same, in Forced during the flush (the flusher reads the mode after a
// Sync whose ForceVersion is new).
func TestReview144GoexitInForcedStopsFlusher(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &r144Store{}
		st.sync = func(n int64, ctx context.Context, s breaker.Sync) (breaker.Fleet, error) {
			return breaker.Fleet{State: resilience.StateClosed, Generation: 1, ForceVersion: 7}, nil
		}
		st.forced = func(n int64, ctx context.Context) (breaker.Forcing, uint64, error) {
			if n == 1 {
				runtime.Goexit()
			}
			return breaker.Forcing{}, 7, nil
		}
		b := r144New(st)
		defer b.Close()
		time.Sleep(20 * r144Every)
		synctest.Wait()
		if n := st.syncs.Load(); n < 10 {
			t.Fatalf("after a Goexit in one Forced the flusher made %d Syncs in 20 intervals", n)
		}
	})
}

// SetMode returns a Force's fault as its error: a Goexit in Force should
// not end the caller's goroutine.
func TestReview144GoexitInForceEndsCaller(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &r144Store{}
		st.force = func(n int64, ctx context.Context, f breaker.Forcing) error {
			if n == 1 {
				runtime.Goexit()
			}
			return nil
		}
		b := r144New(st)
		defer b.Close()
		returned := make(chan error, 1)
		go func() {
			returned <- b.SetMode(t.Context(), breaker.ForcedOpen, "op")
		}()
		synctest.Wait()
		select {
		case <-returned:
		default:
			t.Fatal("SetMode never returned: a Goexit in the store's Force ended the caller's goroutine")
		}
	})
}

// Fleet returns a Read's fault as its error.
func TestReview144GoexitInReadEndsCaller(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &r144Store{}
		st.read = func(n int64, ctx context.Context) (breaker.FleetStatus, error) {
			runtime.Goexit()
			return breaker.FleetStatus{}, nil
		}
		b := r144New(st)
		defer b.Close()
		returned := make(chan error, 1)
		go func() {
			_, err := b.Fleet(t.Context())
			returned <- err
		}()
		synctest.Wait()
		select {
		case <-returned:
		default:
			t.Fatal("Fleet never returned: a Goexit in the store's Read ended the caller's goroutine")
		}
	})
}

// A Goexit in Watch: the replica should watch again after an interval.
func TestReview144GoexitInWatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &r144Store{}
		st.watch = func(n int64, ctx context.Context, changed func(breaker.Fleet)) error {
			if n == 1 {
				runtime.Goexit()
			}
			<-ctx.Done()
			return ctx.Err()
		}
		b := r144New(st)
		defer b.Close()
		time.Sleep(5 * r144Every)
		synctest.Wait()
		if n := st.watches.Load(); n < 2 {
			t.Fatalf("after a Goexit in Watch the replica watched %d times in 5 intervals: never again", n)
		}
	})
}

// Promise 4: Close takes at most about two flush intervals "whatever the
// store does": a Sync that ignores its context.
func TestReview144CloseSyncIgnoresContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		st := &r144Store{}
		st.sync = func(n int64, ctx context.Context, s breaker.Sync) (breaker.Fleet, error) {
			if n >= 3 {
				<-release // a store that ignores ctx (a client without a deadline)
			}
			return breaker.Fleet{State: resilience.StateClosed, Generation: 1}, nil
		}
		b := r144New(st)
		time.Sleep(3 * r144Every)
		closed := make(chan struct{})
		go func() { b.Close(); close(closed) }()
		time.Sleep(5 * r144Every)
		synctest.Wait()
		hung := true
		select {
		case <-closed:
			hung = false
		default:
		}
		close(release)
		<-closed
		if hung {
			t.Fatal("Close still waits 5 flush intervals after it was called: it waits for a Sync that ignores its context")
		}
	})
}

// The same with a Watch that ignores its context.
func TestReview144CloseWatchIgnoresContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		st := &r144Store{}
		st.watch = func(n int64, ctx context.Context, changed func(breaker.Fleet)) error {
			<-release
			return nil
		}
		b := r144New(st)
		time.Sleep(3 * r144Every)
		closed := make(chan struct{})
		go func() { b.Close(); close(closed) }()
		time.Sleep(5 * r144Every)
		synctest.Wait()
		hung := true
		select {
		case <-closed:
			hung = false
		default:
		}
		close(release)
		<-closed
		if hung {
			t.Fatal("Close still waits 5 flush intervals after it was called: it waits for a Watch that ignores its context")
		}
	})
}

// Promise 3, broadly: every method panics (nil, error, string values),
// many goroutines call a healthy dependency, SetMode and Fleet; no call
// fails, SetMode and Fleet return errors, and once the store heals the
// last mode SetMode could not write is written.
func TestReview144PanicEverywhere(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var healthy atomic.Bool
		vals := []any{nil, errors.New("boom"), "str", 42}
		pick := func(n int64) any { return vals[n%int64(len(vals))] }
		st := &r144Store{}
		st.sync = func(n int64, ctx context.Context, s breaker.Sync) (breaker.Fleet, error) {
			if !healthy.Load() {
				panic(pick(n))
			}
			return breaker.Fleet{State: resilience.StateClosed, Generation: 1, ForceVersion: st.version}, nil
		}
		st.watch = func(n int64, ctx context.Context, changed func(breaker.Fleet)) error {
			if !healthy.Load() {
				panic(pick(n))
			}
			<-ctx.Done()
			return ctx.Err()
		}
		st.force = func(n int64, ctx context.Context, f breaker.Forcing) error {
			if !healthy.Load() {
				panic(pick(n))
			}
			return nil
		}
		st.forced = func(n int64, ctx context.Context) (breaker.Forcing, uint64, error) {
			if !healthy.Load() {
				panic(pick(n))
			}
			return st.current(), st.version, nil
		}
		st.restore = func(n int64, ctx context.Context) error {
			if !healthy.Load() {
				panic(pick(n))
			}
			return nil
		}
		st.read = func(n int64, ctx context.Context) (breaker.FleetStatus, error) {
			if !healthy.Load() {
				panic(pick(n))
			}
			return breaker.FleetStatus{}, nil
		}
		b := r144New(st)
		defer b.Close()
		var wg sync.WaitGroup
		var failedCalls atomic.Int64
		for g := range 16 {
			wg.Go(func() {
				for i := range 50 {
					if err := b.Execute(t.Context(), r144OK); err != nil {
						failedCalls.Add(1)
					}
					if g == 0 && i%10 == 0 {
						if _, err := b.Fleet(t.Context()); err == nil {
							t.Error("Fleet returned no error from a panicking Read")
						}
					}
					time.Sleep(7 * time.Millisecond)
				}
			})
		}
		modes := []breaker.Mode{breaker.ForcedOpen, breaker.Disabled, breaker.ForcedClosed}
		for _, m := range modes {
			if err := b.SetMode(t.Context(), m, "op"); err == nil {
				t.Errorf("SetMode(%v) returned no error from a panicking Force", m)
			}
			time.Sleep(50 * time.Millisecond)
		}
		wg.Wait()
		if n := failedCalls.Load(); n != 0 {
			// ForcedClosed is last: calls under ForcedOpen are rejected by
			// design, so count only after.
			t.Logf("%d calls failed (some under ForcedOpen by design)", n)
		}
		// In ForcedClosed now: every call must succeed.
		for range 20 {
			if err := b.Execute(t.Context(), r144OK); err != nil {
				t.Fatalf("a call to a healthy dependency failed while the store panics: %v", err)
			}
		}
		healthy.Store(true)
		time.Sleep(5 * r144Every)
		synctest.Wait()
		if got := st.current(); got.Mode != breaker.ForcedClosed {
			t.Fatalf("the store holds mode %v after healing; want the last SetMode's, forced-closed", got.Mode)
		}
	})
}

// Promise 1: while the hello hangs (a store that honours its deadline),
// a first call waits at most min(FlushInterval/10, a tenth of its time
// left), and never fails because of the store.
func TestReview144HelloWaitBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &r144Store{}
		st.sync = func(n int64, ctx context.Context, s breaker.Sync) (breaker.Fleet, error) {
			<-ctx.Done()
			return breaker.Fleet{}, ctx.Err()
		}
		b := r144New(st)
		defer b.Close()
		start := time.Now()
		if err := b.Execute(t.Context(), r144OK); err != nil {
			t.Fatalf("first call failed: %v", err)
		}
		if d := time.Since(start); d > r144Every/10 {
			t.Fatalf("first call (no deadline) waited %v > %v", d, r144Every/10)
		}
		start = time.Now()
		if err := b.Execute(t.Context(), r144OK); err != nil {
			t.Fatalf("second call failed: %v", err)
		}
		if d := time.Since(start); d > 0 {
			t.Fatalf("second call waited %v after the first waited the whole bound", d)
		}
		b2 := r144New(st)
		defer b2.Close()
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		defer cancel()
		start = time.Now()
		if err := b2.Execute(ctx, r144OK); err != nil {
			t.Fatalf("first call with a deadline failed: %v", err)
		}
		if d := time.Since(start); d > 5*time.Millisecond {
			t.Fatalf("first call with 50ms left waited %v > 5ms", d)
		}
	})
}

// Promise 2: a fleet open state the store stops confirming (its Syncs
// fail, or hang to their deadline) gives way within max(OpenTimeout,
// 3 intervals) (+ an interval of slack); a healthy dependency then serves
// every call.
func TestReview144StaleOpenBound(t *testing.T) {
	for _, mode := range []string{"error", "hang", "panic"} {
		t.Run(mode, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var broken atomic.Bool
				st := &r144Store{}
				st.sync = func(n int64, ctx context.Context, s breaker.Sync) (breaker.Fleet, error) {
					if broken.Load() {
						switch mode {
						case "error":
							return breaker.Fleet{}, errors.New("down")
						case "hang":
							<-ctx.Done()
							return breaker.Fleet{}, ctx.Err()
						default:
							panic("down")
						}
					}
					return breaker.Fleet{State: resilience.StateOpen, Generation: 2, ChangedFor: time.Millisecond}, nil
				}
				b := r144New(st, breaker.OpenTimeout(time.Second))
				defer b.Close()
				time.Sleep(r144Every / 2)
				if err := b.Execute(t.Context(), r144OK); !breaker.IsRejection(err) {
					t.Fatalf("fleet open: want a rejection, got %v", err)
				}
				broken.Store(true)
				brokeAt := time.Now()
				var firstOK time.Duration = -1
				for time.Since(brokeAt) < 3*time.Second {
					if err := b.Execute(t.Context(), r144OK); err == nil {
						firstOK = time.Since(brokeAt)
						break
					}
					time.Sleep(time.Millisecond)
				}
				bound := max(time.Second, 3*r144Every) + r144Every
				if firstOK < 0 || firstOK > bound {
					t.Fatalf("healthy calls rejected for %v after the store broke; bound %v", firstOK, bound)
				}
				for range 200 {
					if err := b.Execute(t.Context(), r144OK); err != nil {
						t.Fatalf("after going alone, a healthy call failed: %v", err)
					}
					time.Sleep(time.Millisecond)
				}
			})
		})
	}
}

// A Watch that calls its callback after it returned, from another
// goroutine, after Close: no crash, and Close still bounded.
func TestReview144WatchCallsAfterReturn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		late := make(chan func(breaker.Fleet), 8)
		st := &r144Store{}
		st.watch = func(n int64, ctx context.Context, changed func(breaker.Fleet)) error {
			late <- changed
			return errors.New("gone")
		}
		b := r144New(st)
		time.Sleep(r144Every)
		cb := <-late
		b.Close()
		done := make(chan struct{})
		go func() {
			defer close(done)
			cb(breaker.Fleet{State: resilience.StateOpen, Generation: 99})
			cb(breaker.Fleet{State: resilience.StateClosed, Generation: 100})
		}()
		<-done
		// drain
		for len(late) > 0 {
			<-late
		}
	})
}

// The consequence of the dead flusher: the replica neither shares nor
// goes alone (its down flag never set, the fleet's state closed), so
// FailureRate is applied nowhere: a dependency failing every call never
// opens the breaker (ConsecutiveFailures off).
func TestReview144GoexitInSyncRateNowhere(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &r144Store{}
		st.sync = func(n int64, ctx context.Context, s breaker.Sync) (breaker.Fleet, error) {
			switch n {
			case 1:
				return breaker.Fleet{State: resilience.StateClosed, Generation: 1}, nil
			case 2:
				runtime.Goexit()
			}
			return breaker.Fleet{}, errors.New("down") // the store is down from then on
		}
		b := r144New(st, breaker.ConsecutiveFailures(0))
		defer b.Close()
		time.Sleep(3 * r144Every)
		boom := errors.New("dependency down")
		rejected := 0
		for range 200 {
			if err := b.Execute(t.Context(), func(context.Context) error { return boom }); breaker.IsRejection(err) {
				rejected++
			}
			time.Sleep(5 * time.Millisecond)
		}
		if rejected == 0 {
			t.Fatalf("200 failures in a row over 1 s, store down, never rejected: FailureRate(0.5, 10) applied neither fleet-wide nor locally")
		}
	})
}

// Control: the same with the store failing by an error (no Goexit) opens.
func TestReview144StoreDownRateLocal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &r144Store{}
		st.sync = func(n int64, ctx context.Context, s breaker.Sync) (breaker.Fleet, error) {
			if n == 1 {
				return breaker.Fleet{State: resilience.StateClosed, Generation: 1}, nil
			}
			return breaker.Fleet{}, errors.New("down")
		}
		b := r144New(st, breaker.ConsecutiveFailures(0))
		defer b.Close()
		time.Sleep(3 * r144Every)
		boom := errors.New("dependency down")
		rejected := 0
		for range 200 {
			if err := b.Execute(t.Context(), func(context.Context) error { return boom }); breaker.IsRejection(err) {
				rejected++
			}
			time.Sleep(5 * time.Millisecond)
		}
		if rejected == 0 {
			t.Fatalf("store down by error: never rejected")
		}
	})
}

// Promise 2: a fleet state the store's Syncs no longer confirm gives way
// within the staleness bound. A Watch that hands the same change again
// (a repeat, "heard already") refreshes the replica's "heard" clock before
// apply drops it: while Syncs fail, a replica rejects a healthy
// dependency for as long as the repeats come.
func TestReview144WatchRepeatKeepsStaleOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var broken atomic.Bool
		st := &r144Store{}
		st.sync = func(n int64, ctx context.Context, s breaker.Sync) (breaker.Fleet, error) {
			if broken.Load() {
				return breaker.Fleet{}, errors.New("script fails (OOM, say); pub/sub still up")
			}
			return breaker.Fleet{State: resilience.StateOpen, Generation: 2, ChangedFor: time.Millisecond}, nil
		}
		st.watch = func(n int64, ctx context.Context, changed func(breaker.Fleet)) error {
			for {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(r144Every):
					changed(breaker.Fleet{State: resilience.StateOpen, Generation: 2}) // a repeat
				}
			}
		}
		b := r144New(st, breaker.OpenTimeout(300*time.Millisecond))
		defer b.Close()
		time.Sleep(r144Every / 2)
		broken.Store(true)
		time.Sleep(3 * time.Second) // 10 staleness bounds
		if err := b.Execute(t.Context(), r144OK); err != nil {
			t.Fatalf("3 s after the store's Syncs began failing (staleness bound %v), a healthy call is still rejected: %v", max(300*time.Millisecond, 3*r144Every), err)
		}
	})
}

// Watch flapping states from several goroutines while calls and flushes
// go: no deadlock, no panic, calls end.
func TestReview144WatchFlapConcurrent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &r144Store{}
		var gen atomic.Uint64
		gen.Store(1)
		st.sync = func(n int64, ctx context.Context, s breaker.Sync) (breaker.Fleet, error) {
			return breaker.Fleet{State: resilience.StateClosed, Generation: gen.Load()}, nil
		}
		st.watch = func(n int64, ctx context.Context, changed func(breaker.Fleet)) error {
			var wg sync.WaitGroup
			for g := range 4 {
				wg.Go(func() {
					for i := range 100 {
						g := gen.Add(1)
						s := resilience.StateClosed
						if (int(g)+i)%2 == 0 {
							s = resilience.StateOpen
						}
						changed(breaker.Fleet{State: s, Generation: g})
						time.Sleep(time.Millisecond)
					}
				})
				_ = g
			}
			wg.Wait()
			<-ctx.Done()
			return ctx.Err()
		}
		b := r144New(st)
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for range 100 {
					_ = b.Execute(t.Context(), r144OK)
					time.Sleep(time.Millisecond)
				}
			})
		}
		wg.Wait()
		time.Sleep(5 * r144Every)
		closed := make(chan struct{})
		go func() { b.Close(); close(closed) }()
		time.Sleep(3 * r144Every)
		synctest.Wait()
		select {
		case <-closed:
		default:
			t.Fatal("Close hung")
		}
		if err := b.Execute(t.Context(), r144OK); err != nil && b.FleetState() == resilience.StateClosed {
			t.Fatalf("fleet closed, yet rejected: %v", err)
		}
	})
}
