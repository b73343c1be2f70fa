package breakerstore_test

// review146: attacks on a replica that "vouches" for the dependency in the
// fleet's opening it decided alone in (breaker/shared.go: fleet.vouched,
// apply's rejoin). Real redis-server processes of the test's own, real
// time; each test bounded to a few seconds.

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/redis/breakerstore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// r146Store is the Redis store behind a switch: while down, Sync fails at
// once (as a replica cut off from Redis), the other replicas unaffected.
// It is no SharedWatcher: the replica learns only by its flushes.
type r146Store struct {
	st   *breakerstore.Store
	down atomic.Bool
}

func (s *r146Store) Sync(ctx context.Context, name string, sy breaker.Sync) (breaker.Fleet, error) {
	if s.down.Load() {
		return breaker.Fleet{}, errors.New("review146: cut off")
	}
	return s.st.Sync(ctx, name, sy)
}

func (s *r146Store) Read(ctx context.Context, name string, p breaker.FleetPolicy) (breaker.FleetStatus, error) {
	return s.st.Read(ctx, name, p)
}

var r146Fail = errors.New("review146: dependency failed")

// r146Waitfor polls cond every 2 ms until it holds or d passes.
func r146Waitfor(d time.Duration, cond func() bool) bool {
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		if cond() {
			return true
		}
		time.Sleep(2 * time.Millisecond)
	}
	return cond()
}

const (
	r146Flush = 150 * time.Millisecond
	r146Open  = 400 * time.Millisecond
)

// r146Vouching brings replica a (alone on its store) to vouch: the fleet
// opens on its failures, a is cut off past the staleness bound, its calls
// succeed alone, and it rejoins with the fleet half-open in the same
// generation. It returns that generation.
func r146Vouching(t *testing.T, a *breaker.Breaker, w *r146Store, name string) uint64 {
	t.Helper()
	ctx := t.Context()
	for range 20 {
		_ = a.Execute(ctx, func(context.Context) error { return r146Fail })
	}
	if !r146Waitfor(2*time.Second, func() bool { return a.FleetState() == resilience.StateOpen }) {
		t.Fatalf("the fleet did not open: %v", a.FleetState())
	}
	fs, err := a.Fleet(ctx)
	if err != nil {
		t.Fatal(err)
	}
	gen := fs.Generation
	w.down.Store(true)
	// Past max(OpenTimeout, 3 flushes): a decides alone; its calls succeed.
	ok := 0
	r146Waitfor(3*time.Second, func() bool {
		if a.Execute(ctx, func(context.Context) error { return nil }) == nil {
			ok++
		}
		return ok >= 30
	})
	if ok < 30 {
		t.Fatalf("the replica never decided alone: %d successes", ok)
	}
	w.down.Store(false)
	// The rejoin flush: the fleet is half-open in gen (OpenTimeout passed).
	time.Sleep(2 * r146Flush)
	fs, err = a.Fleet(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if fs.Generation != gen || fs.State != resilience.StateHalfOpen {
		t.Fatalf("setup: store %v gen %d, want half-open gen %d", fs.State, fs.Generation, gen)
	}
	if a.FleetState() != resilience.StateClosed {
		t.Fatalf("setup: the replica does not vouch: FleetState %v", a.FleetState())
	}
	return gen
}

func r146Breaker(t *testing.T, name string, store breaker.SharedStore, opts ...breaker.Option) *breaker.Breaker {
	t.Helper()
	all := append([]breaker.Option{
		breaker.Shared(store), breaker.FailureRate(0.5, 10), breaker.Window(10*time.Second, 10),
		breaker.OpenTimeout(r146Open), breaker.FlushInterval(r146Flush), breaker.HalfOpenRequests(1),
		breaker.ConsecutiveFailures(0),
	}, opts...)
	b := breaker.New(name, all...)
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// (1) The calls a vouching replica makes in the fleet's half-open
// generation G are counts of G: the store must drop them (it counts only
// while closed, and a batch only in its own generation). The batch that
// carries the probe's success that closes the fleet carries those counts
// too; they must not land in the new generation's window.
func TestReview146VouchingCountsLandInTheNextGeneration(t *testing.T) {
	srv := redistest.Start(t)
	w := &r146Store{st: breakerstore.New(srv.Client(), "r146a:")}
	a := r146Breaker(t, "dep", w)
	gen := r146Vouching(t, a, w, "dep")

	// a calls every 2 ms, all successes: it asks for the probe, runs it,
	// and its next flush reports it with the calls of that interval.
	var made atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := a.Execute(context.Background(), func(context.Context) error { return nil }); err != nil {
				t.Errorf("a vouching replica's call refused: %v", err)
			}
			made.Add(1)
			time.Sleep(2 * time.Millisecond)
		}
	})
	defer func() { close(stop); wg.Wait() }()

	var first breaker.FleetStatus
	closed := r146Waitfor(3*time.Second, func() bool {
		fs, err := a.Fleet(context.Background())
		if err == nil && fs.Generation != gen {
			first = fs
			return true
		}
		return false
	})
	if !closed {
		t.Fatalf("the fleet did not leave generation %d in 3 s", gen)
	}
	t.Logf("fleet left gen %d: %v gen %d, requests %d failures %d (calls made so far %d)", gen, first.State, first.Generation, first.Requests, first.Failures, made.Load())
	// Seen within 2 ms of the change, long before a's next flush (150 ms):
	// nothing made in the new generation can be in its window yet.
	if first.State == resilience.StateClosed && first.Requests > 1 {
		t.Errorf("the new generation's window holds %d requests at once as the fleet closed: the vouching replica's calls of the half-open generation %d counted in generation %d", first.Requests, gen, first.Generation)
	}
}

// (1)/(5) A vouching replica whose calls come less often than its flushes
// (the case admitting's "rare" path exists for) asks for the fleet's probe
// at the flush after each call; the permit lapses a flush interval later,
// before its next call. The fleet must still close in bounded time.
func TestReview146VouchingRareCallsCloseTheFleet(t *testing.T) {
	srv := redistest.Start(t)
	w := &r146Store{st: breakerstore.New(srv.Client(), "r146b:")}
	a := r146Breaker(t, "dep", w)
	gen := r146Vouching(t, a, w, "dep")

	refused := 0
	closedAt := time.Duration(-1)
	start := time.Now()
	for time.Since(start) < 4*time.Second {
		if err := a.Execute(t.Context(), func(context.Context) error { return nil }); err != nil {
			refused++
		}
		fs, err := a.Fleet(t.Context())
		if err == nil && fs.Generation != gen {
			closedAt = time.Since(start)
			break
		}
		time.Sleep(4 * r146Flush) // 600 ms: rarer than flushes
	}
	if refused > 0 {
		t.Errorf("%d calls of a vouching replica refused", refused)
	}
	if closedAt < 0 {
		fs, _ := a.Fleet(t.Context())
		t.Errorf("the fleet stayed in generation %d (%v) for 4 s: a vouching replica with calls every 600 ms (flushes 150 ms, OpenTimeout 400 ms) never probes for it; FleetState %v", gen, fs.State, a.FleetState())
	} else {
		t.Logf("fleet left gen %d after %v", gen, closedAt)
	}
}

// (4) pipeline.WaitWhenOpen with a shared breaker: calls that wait while
// the fleet is open and its store stops answering are let go once the
// replica decides alone (max(OpenTimeout, 3 flushes) after the last
// answer, then a tick of a flush interval); once it vouches, its calls
// neither wait nor are refused.
func TestReview146WaitWhenOpenAcrossVouching(t *testing.T) {
	srv := redistest.Start(t)
	w := &r146Store{st: breakerstore.New(srv.Client(), "r146c:")}
	a := r146Breaker(t, "dep", w)
	ctx := t.Context()
	for range 20 {
		_ = a.Execute(ctx, func(context.Context) error { return r146Fail })
	}
	if !r146Waitfor(2*time.Second, func() bool { return a.FleetState() == resilience.StateOpen }) {
		t.Fatal("the fleet did not open")
	}
	p := pipeline.New(pipeline.WithBreaker(a), pipeline.WaitWhenOpen())
	w.down.Store(true)
	cut := time.Now()
	stale := max(r146Open, 3*r146Flush)
	var wg sync.WaitGroup
	took := make([]time.Duration, 5)
	errs := make([]error, 5)
	for i := range 5 {
		wg.Go(func() {
			c, cancel := context.WithTimeout(ctx, 4*time.Second)
			defer cancel()
			_, errs[i] = pipeline.Do(c, p, func(context.Context) (int, error) { return 1, nil })
			took[i] = time.Since(cut)
		})
	}
	wg.Wait()
	bound := stale + 3*r146Flush + 150*time.Millisecond // the last answer up to a flush before cut
	for i := range 5 {
		if errs[i] != nil || took[i] > bound {
			t.Errorf("waiter %d: %v after %v (bound %v from the cut)", i, errs[i], took[i], bound)
		}
	}
	// Alone: successes; then back, vouching.
	for range 30 {
		_ = a.Execute(ctx, func(context.Context) error { return nil })
	}
	w.down.Store(false)
	time.Sleep(2 * r146Flush)
	if a.FleetState() != resilience.StateClosed {
		t.Fatalf("not vouching: %v", a.FleetState())
	}
	var slow, failed int
	for range 40 {
		t0 := time.Now()
		c, cancel := context.WithTimeout(ctx, 3*time.Second)
		_, err := pipeline.Do(c, p, func(context.Context) (int, error) { return 1, nil })
		cancel()
		if err != nil {
			failed++
		}
		if time.Since(t0) > r146Flush+50*time.Millisecond {
			slow++
		}
		time.Sleep(10 * time.Millisecond)
	}
	if failed > 0 || slow > 0 {
		t.Errorf("vouching replica through WaitWhenOpen: %d of 40 calls failed, %d held longer than a flush interval", failed, slow)
	}
}

// (3) pub/sub racing the rejoin: two replicas on a real redis-server
// (Watch on), the fleet open, Redis frozen past the staleness bound; a
// serves a healthy dependency alone, b is idle. At the thaw b's first
// call probes for the fleet and fails (its only failure): the fleet
// reopens. a must not be refused while it goes by the fleet's opening it
// vouched for (its FleetState closed before and after the call), and its
// longest run of refusals must end within the new opening's open timeout
// and a few flushes (a bounded way out).
func TestReview146ThawRacesAFailingProbe(t *testing.T) {
	srv := redistest.Start(t)
	st := breakerstore.New(srv.Client(), "r146d:")
	flush := 50 * time.Millisecond
	open := 300 * time.Millisecond
	mk := func() *breaker.Breaker {
		b := breaker.New("dep", breaker.Shared(st), breaker.FailureRate(0.5, 10), breaker.Window(10*time.Second, 10),
			breaker.OpenTimeout(open), breaker.FlushInterval(flush), breaker.HalfOpenRequests(1))
		t.Cleanup(func() { _ = b.Close() })
		return b
	}
	a, b := mk(), mk()
	ctx := t.Context()
	for range 20 {
		_ = a.Execute(ctx, func(context.Context) error { return r146Fail })
		_ = a.Execute(ctx, func(context.Context) error { return nil })
	}
	if !r146Waitfor(2*time.Second, func() bool {
		return a.FleetState() == resilience.StateOpen && b.FleetState() == resilience.StateOpen
	}) {
		t.Fatalf("the fleet did not open: %v %v", a.FleetState(), b.FleetState())
	}
	fs, _ := a.Fleet(ctx)
	gen := fs.Generation
	srv.Freeze()
	frozen := true
	defer func() {
		if frozen {
			srv.Thaw()
		}
	}()
	// a alone, succeeding.
	ok := 0
	r146Waitfor(2*time.Second, func() bool {
		if a.Execute(ctx, func(context.Context) error { return nil }) == nil {
			ok++
		}
		return ok >= 30
	})
	if ok < 30 {
		t.Fatalf("a never decided alone")
	}
	time.Sleep(open) // the fleet's open timeout long gone: half-open at the thaw
	var bFailed atomic.Bool
	stop := make(chan struct{})
	var wg sync.WaitGroup
	// b, idle while Redis was frozen (nothing to vouch with): once it hears
	// the half-open fleet again, its calls probe; the first one that
	// reaches the dependency fails, the rest succeed.
	wg.Go(func() {
		for b.FleetState() != resilience.StateHalfOpen {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
		for {
			select {
			case <-stop:
				return
			default:
			}
			_ = b.Execute(context.Background(), func(context.Context) error {
				if bFailed.CompareAndSwap(false, true) {
					return r146Fail
				}
				return nil
			})
			time.Sleep(time.Millisecond)
		}
	})
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}()
	srv.Thaw()
	frozen = false
	thaw := time.Now()
	var refusedClosed int
	var longest, run time.Duration
	var runStart time.Time
	for time.Since(thaw) < 2500*time.Millisecond {
		before := a.FleetState()
		err := a.Execute(context.Background(), func(context.Context) error { return nil })
		after := a.FleetState()
		if err != nil {
			if before == resilience.StateClosed && after == resilience.StateClosed {
				refusedClosed++
			}
			if runStart.IsZero() {
				runStart = time.Now()
			}
			run = time.Since(runStart)
			longest = max(longest, run)
		} else {
			runStart = time.Time{}
		}
		time.Sleep(time.Millisecond)
	}
	close(stop)
	wg.Wait()
	fs, _ = a.Fleet(ctx)
	t.Logf("gen at open %d, now %v gen %d; b's probe failed: %v; a's longest refusal run %v; refused with FleetState closed %d", gen, fs.State, fs.Generation, bFailed.Load(), longest, refusedClosed)
	if refusedClosed > 0 {
		t.Errorf("a refused %d calls while it went by a closed fleet (own breaker healthy)", refusedClosed)
	}
	if bound := open + 4*flush + 150*time.Millisecond; longest > bound {
		t.Errorf("a healthy replica refused for %v in a row after the thaw (bound %v)", longest, bound)
	}
	if fs.State != resilience.StateClosed {
		t.Errorf("fleet not closed 2.5 s after the thaw: %v", fs.State)
	}
}

// r146WStore is r146Store that hears the fleet's changes by pub/sub even
// while its flushes fail (a link too slow or too lossy for the flushes'
// round trips, the subscription still up).
type r146WStore struct{ r146Store }

func (s *r146WStore) Watch(ctx context.Context, name string, changed func(breaker.Fleet)) error {
	return s.st.Watch(ctx, name, changed)
}

// The doc of breaker.Shared: "If that flush finds the fleet still in the
// opening this replica last heard of, while this replica's own breaker is
// closed and its own calls succeeded while it decided alone (at least
// HalfOpenRequests of them), the opening is stale for it: it goes on
// deciding alone". A replica whose flushes began to fail while the fleet
// was closed, which then heard the opening by pub/sub, went alone when it
// was unconfirmed past the bound, and served the dependency alone, meets
// every condition; its rejoin must not refuse its calls.
func TestReview146OpeningHeardByWatchWhileCutOffIsVouchedFor(t *testing.T) {
	srv := redistest.Start(t)
	st := breakerstore.New(srv.Client(), "r146e:")
	w := &r146WStore{r146Store{st: st}}
	a := r146Breaker(t, "dep", w)
	b := r146Breaker(t, "dep", st)
	ctx := t.Context()
	time.Sleep(2 * r146Flush) // both greeted, closed
	w.down.Store(true)        // a's flushes fail from now on, its subscription stays
	time.Sleep(2 * r146Flush)
	for range 20 {
		_ = b.Execute(ctx, func(context.Context) error { return r146Fail })
	}
	if !r146Waitfor(2*time.Second, func() bool { return a.FleetState() == resilience.StateOpen }) {
		t.Fatalf("a did not hear the opening by pub/sub: %v (b %v)", a.FleetState(), b.FleetState())
	}
	fs, _ := b.Fleet(ctx)
	gen := fs.Generation
	// Unconfirmed past max(OpenTimeout, 3 flushes): a decides alone, and
	// its calls succeed.
	ok := 0
	r146Waitfor(3*time.Second, func() bool {
		if a.Execute(ctx, func(context.Context) error { return nil }) == nil {
			ok++
		}
		return ok >= 30
	})
	if ok < 30 {
		t.Fatalf("a never decided alone: %d", ok)
	}
	w.down.Store(false)
	time.Sleep(2 * r146Flush) // the rejoin flush
	fs, _ = b.Fleet(ctx)
	if fs.Generation != gen || fs.State == resilience.StateClosed {
		t.Fatalf("setup: fleet %v gen %d, want the opening %d", fs.State, fs.Generation, gen)
	}
	st0 := a.FleetState()
	refused := 0
	for range 100 {
		if a.Execute(ctx, func(context.Context) error { return nil }) != nil {
			refused++
		}
		time.Sleep(2 * time.Millisecond)
	}
	if st0 != resilience.StateClosed || refused > 0 {
		t.Errorf("a rejoined the opening (gen %d) it had heard of and outlived alone, own breaker closed, 30 successes: FleetState %v, %d of 100 healthy calls refused", gen, st0, refused)
	}
}
