package idempotency

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/internal/monotime"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// r151 modes of the fake store.
const (
	r151Healthy = iota
	r151Down    // every call fails at once
	r151Refuse  // reads, refuses writes (Begin: ErrWritesRefused when no record)
	r151Hang    // every call waits for its ctx
)

var errR151Blip = errors.New("r151: transient store error")

// r151Store is a MemoryStore whose health the test sets.
type r151Store struct {
	mem      *MemoryStore
	mode     atomic.Int32
	failNext atomic.Int32 // fail the next n Begins of request keys (not the probe's)
	hangNext atomic.Int32 // the next n Begins of request keys wait for their ctx

	begins, probeBegins, releases, reqReleases, completes atomic.Int64
	failCompletes                                         atomic.Int32 // fail the next n Completes
}

func newR151Store() *r151Store { return &r151Store{mem: NewMemoryStore(0)} }

func (s *r151Store) fail(ctx context.Context) error {
	switch s.mode.Load() {
	case r151Down:
		return errR151Blip
	case r151Hang:
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

func (s *r151Store) Begin(ctx context.Context, key string, claim Record, lease time.Duration) (*Record, error) {
	s.begins.Add(1)
	if key == probeKey {
		s.probeBegins.Add(1)
	} else if s.failNext.Load() > 0 && s.failNext.Add(-1) >= 0 {
		return nil, errR151Blip
	} else if s.hangNext.Load() > 0 && s.hangNext.Add(-1) >= 0 {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if err := s.fail(ctx); err != nil {
		return nil, err
	}
	if s.mode.Load() == r151Refuse {
		s.mem.mu.Lock()
		e, ok := s.mem.entries[key]
		var rec Record
		if ok && time.Now().Before(e.expires) {
			rec = e.rec
		} else {
			ok = false
		}
		s.mem.mu.Unlock()
		if ok {
			if rec.Holds(claim) {
				return nil, nil
			}
			return &rec, nil
		}
		return nil, fmt.Errorf("%w: OOM command not allowed", ErrWritesRefused)
	}
	return s.mem.Begin(ctx, key, claim, lease)
}

func (s *r151Store) Renew(ctx context.Context, key string, claim Record, lease time.Duration) error {
	if err := s.fail(ctx); err != nil {
		return err
	}
	return s.mem.Renew(ctx, key, claim, lease)
}

func (s *r151Store) Complete(ctx context.Context, key string, claim, rec Record, ttl time.Duration) error {
	s.completes.Add(1)
	if s.failCompletes.Load() > 0 && s.failCompletes.Add(-1) >= 0 {
		return errR151Blip
	}
	if err := s.fail(ctx); err != nil {
		return err
	}
	if s.mode.Load() == r151Refuse {
		return fmt.Errorf("%w: OOM", ErrWritesRefused)
	}
	return s.mem.Complete(ctx, key, claim, rec, ttl)
}

func (s *r151Store) Release(ctx context.Context, key string, claim Record) error {
	s.releases.Add(1)
	if key != probeKey {
		s.reqReleases.Add(1)
	}
	if err := s.fail(ctx); err != nil {
		return err
	}
	return s.mem.Release(ctx, key, claim)
}

// r151Events counts the guard's events by kind.
type r151Events struct {
	mu sync.Mutex
	n  map[resilience.EventKind]int
}

func (e *r151Events) OnEvent(ev resilience.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.n == nil {
		e.n = map[resilience.EventKind]int{}
	}
	e.n[ev.Kind]++
}

func (e *r151Events) count(k resilience.EventKind) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n[k]
}

func r151Guard(s Store, ev *r151Events, opts ...Option) *Guard {
	opts = append([]Option{WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))}, opts...)
	if ev != nil {
		opts = append(opts, WithListener(ev))
	}
	return NewGuard(s, opts...)
}

// r151Run runs one request of key: it reports whether the handler ran
// (a claim was given), completing it with 201.
func r151Run(t *testing.T, g *Guard, key string) (ran bool, replay *Record, err error) {
	t.Helper()
	c, rec, err := g.Begin(context.Background(), "s", key, "fp-"+key)
	if err != nil || rec != nil {
		return false, rec, err
	}
	if cerr := c.Complete(context.Background(), Record{Status: 201, Body: []byte("done " + key)}); cerr != nil {
		t.Logf("complete %s: %v", key, cerr)
	}
	return true, nil, nil
}

// r151ToSecondStart sleeps to just past the start of the guard's next
// second (its outage counts by seconds of monotime).
func r151ToSecondStart() {
	now := monotime.Now()
	next := monotime.Reading((epochOf(now) + 1) * int64(time.Second))
	time.Sleep(time.Duration(next-now) + 50*time.Millisecond)
}

// Options doc (review149 change): "From the store's first failure, the
// guard asks it once a second ... until it answers, so that ... a
// transient error, which the next question finds over, does not add up
// with another long after it". Two single transient errors a little over
// FailOpenAfter apart, on a guard that sees no other traffic, each found
// over by the next probe: the second must not fail the guard open and run
// a key the store holds a second time (review116's concern).
func TestReview151TwoBlipsFailOpenAfterApartDoNotFailOpen(t *testing.T) {
	for _, gap := range []time.Duration{10*time.Second + 200*time.Millisecond, 10*time.Second + 600*time.Millisecond} {
		t.Run(gap.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newR151Store()
				ev := &r151Events{}
				g := r151Guard(s, ev) // default FailOpenAfter 10 s
				if ran, _, err := r151Run(t, g, "stored"); !ran || err != nil {
					t.Fatalf("first run: ran %v err %v", ran, err)
				}
				time.Sleep(time.Minute) // a quiet guard
				r151ToSecondStart()

				s.failNext.Store(1) // blip 1, on a fresh request
				if ran, _, err := r151Run(t, g, "blip-1"); ran || err == nil {
					t.Fatalf("blip 1: ran %v err %v, want the store's error", ran, err)
				}
				time.Sleep(gap) // the probe a second later finds the store answering
				if p := s.probeBegins.Load(); p == 0 {
					t.Fatalf("no probe asked the store after the blip")
				}
				s.failNext.Store(1) // blip 2, on a repeat of a key the store holds
				ran, rec, err := r151Run(t, g, "stored")
				if ran {
					t.Errorf("a second transient error %v after the first (which the probe found over) failed the guard open (%d SharedStateUnavailable) and ran the stored key again",
						gap, ev.count(resilience.EventSharedStateUnavailable))
				} else {
					t.Logf("held: rec %v err %v", rec != nil, err)
				}
				time.Sleep(time.Minute)
			})
		})
	}
}

// A store down for good, with one request and then none: the guard must
// fail open within FailOpenAfter + about 5 s, and its probing must stop
// once open (no probe a second for ever on a guard with no traffic).
func TestReview151RareRequestsFailOpenAndProbingStops(t *testing.T) {
	for _, foa := range []time.Duration{time.Nanosecond, time.Second, 10 * time.Second, 37 * time.Second} {
		t.Run(foa.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newR151Store()
				g := r151Guard(s, nil, FailOpenAfter(foa))
				s.mode.Store(r151Down)
				if ran, _, err := r151Run(t, g, "a"); ran || err == nil {
					if foa > time.Nanosecond {
						t.Fatalf("first request: ran %v err %v", ran, err)
					}
				}
				time.Sleep(foa + 5*time.Second)
				if !g.out.isOpen() {
					t.Fatalf("not failed open %v after a store down for good (FailOpenAfter %v)", foa+5*time.Second, foa)
				}
				p := s.probeBegins.Load()
				if p > int64((foa+5*time.Second)/time.Second)+2 {
					t.Errorf("%d probes in %v: more than one a second", p, foa+5*time.Second)
				}
				time.Sleep(time.Minute)
				if d := s.probeBegins.Load() - p; d > 0 {
					t.Errorf("%d probes in a minute with no request, after failing open", d)
				}
				if ran, _, err := r151Run(t, g, "b"); !ran || err != nil {
					t.Errorf("failed open, a request did not run: %v", err)
				}
			})
		})
	}
}

// After a single blip that the probe finds over, the probing stops.
func TestReview151ProbingStopsAfterAnAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newR151Store()
		g := r151Guard(s, nil)
		s.failNext.Store(1)
		r151Run(t, g, "x")
		time.Sleep(5 * time.Second)
		p := s.probeBegins.Load()
		time.Sleep(5 * time.Minute)
		if d := s.probeBegins.Load() - p; d > 0 {
			t.Errorf("%d probes after the store answered", d)
		}
		if g.asking.Load() {
			t.Errorf("still asking")
		}
	})
}

// Failed open on a store that refuses writes, the guard asks the store
// first, and a refused Begin wrote nothing. Each such request must not
// cost the store more calls later (the orphan reaper Releasing a claim
// that was never written), on a store that is already in trouble.
func TestReview151RefusedClaimsAreNotReapedAsOrphans(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newR151Store()
		g := r151Guard(s, nil, FailOpenAfter(time.Second))
		s.mode.Store(r151Refuse)
		for i := range 5 { // fail open
			r151Run(t, g, fmt.Sprint("warm-", i))
			time.Sleep(600 * time.Millisecond)
		}
		if !g.out.isOpen() || !g.refusing.Load() {
			t.Fatalf("not open on a refusing store: open %v refusing %v", g.out.isOpen(), g.refusing.Load())
		}
		time.Sleep(time.Minute)
		s.reqReleases.Store(0)
		b0 := s.begins.Load()
		const n = 200
		for i := range n {
			if ran, _, err := r151Run(t, g, fmt.Sprint("k-", i)); !ran || err != nil {
				t.Fatalf("request %d on a refusing store, failed open: ran %v err %v", i, ran, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
		time.Sleep(2 * time.Minute) // a few leases: the reaper's tries end
		rel := s.reqReleases.Load()
		t.Logf("%d requests: %d Begins, then %d Releases of request keys", n, s.begins.Load()-b0, rel)
		if rel > 0 {
			t.Errorf("%d Releases (%.1f a request) of claims the store refused to write (ErrWritesRefused): the reaper hammers a store that is out of memory", rel, float64(rel)/n)
		}
	})
}

// Failed open on a refusing store that then hangs: only the first
// request (and the probe's) may wait a StoreTimeout; the others run at
// once, on local records.
func TestReview151RefusingThenHangingDelaysFew(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newR151Store()
		g := r151Guard(s, nil, FailOpenAfter(time.Second))
		s.mode.Store(r151Refuse)
		for i := range 5 {
			r151Run(t, g, fmt.Sprint("warm-", i))
			time.Sleep(600 * time.Millisecond)
		}
		if !g.out.isOpen() || !g.refusing.Load() {
			t.Fatalf("not open/refusing")
		}
		s.mode.Store(r151Hang)
		slow := 0
		const n = 40
		for i := range n {
			start := time.Now()
			if ran, _, err := r151Run(t, g, fmt.Sprint("h-", i)); !ran || err != nil {
				t.Fatalf("request %d: ran %v err %v", i, ran, err)
			}
			if d := time.Since(start); d >= 400*time.Millisecond {
				slow++
			}
			time.Sleep(100 * time.Millisecond)
		}
		// over about 4 s + 40 x 100ms: the first request, and one probe a second at most
		if slow > 1+8 {
			t.Errorf("%d of %d requests waited a StoreTimeout on a hanging store, failed open", slow, n)
		}
		t.Logf("%d of %d slow", slow, n)
		// and a concurrent burst at the flip: each waits one StoreTimeout at most
		s.mode.Store(r151Refuse)
		for i := range 30 { // the probe, a request's turn, learns it refuses
			r151Run(t, g, fmt.Sprint("re-", i))
			time.Sleep(100 * time.Millisecond)
		}
		if !g.refusing.Load() {
			t.Errorf("the probe did not learn that the store refuses writes again")
		}
		s.mode.Store(r151Hang)
		var wg sync.WaitGroup
		var worst atomic.Int64
		for i := range 30 {
			wg.Go(func() {
				start := time.Now()
				r151Run(t, g, fmt.Sprint("burst-", i))
				d := time.Since(start)
				for {
					w := worst.Load()
					if int64(d) <= w || worst.CompareAndSwap(w, int64(d)) {
						break
					}
				}
			})
		}
		wg.Wait()
		if w := time.Duration(worst.Load()); w > 1100*time.Millisecond {
			t.Errorf("a request of the burst waited %v", w)
		}
		s.mode.Store(r151Healthy)
		time.Sleep(time.Minute)
	})
}

// A key the store holds (completed, or in flight on another replica) is
// replayed or 409 by a guard failed open on a store that refuses writes;
// a key run locally meanwhile is replayed after the store recovers, not
// run again.
func TestReview151RefusingReplaysThenRecovery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newR151Store()
		ev := &r151Events{}
		g := r151Guard(s, ev, FailOpenAfter(time.Second))
		runs := map[string]int{}
		run := func(k string) (*Record, error) {
			ran, rec, err := r151Run(t, g, k)
			if ran {
				runs[k]++
			}
			return rec, err
		}
		run("stored")
		// another replica's claim in flight
		if f, err := s.mem.Begin(context.Background(), scopeKey("s", "inflight"), Record{Fingerprint: "fp-inflight", Token: "other"}, time.Hour); f != nil || err != nil {
			t.Logf("direct claim: %v %v", f, err)
		}
		s.mode.Store(r151Refuse)
		for i := range 5 {
			run(fmt.Sprint("warm-", i))
			time.Sleep(600 * time.Millisecond)
		}
		if !g.out.isOpen() {
			t.Fatalf("not open")
		}
		for range 3 {
			if _, err := run("stored"); err != nil {
				t.Errorf("stored key: %v", err)
			}
			run("local")
			if _, err := run("inflight"); !errors.Is(err, ErrInProgress) {
				t.Errorf("a key in flight on the refusing store: %v, want ErrInProgress", err)
			}
			time.Sleep(300 * time.Millisecond)
		}
		s.mode.Store(r151Healthy)
		time.Sleep(5 * time.Second)
		for range 3 {
			run("local")
			run("stored")
			time.Sleep(time.Second)
		}
		if g.out.isOpen() {
			t.Errorf("still open after the store recovered")
		}
		for k, n := range runs {
			if n > 1 {
				t.Errorf("key %q ran %d times", k, n)
			}
		}
		if ev.count(resilience.EventSharedStateRestored) == 0 {
			t.Errorf("no restored event")
		}
		t.Logf("events: %v", ev.n)
	})
}

// Events and logs while failed open on a refusing store: not one per
// request.
func TestReview151RefusingDoesNotFloodEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newR151Store()
		ev := &r151Events{}
		g := r151Guard(s, ev, FailOpenAfter(time.Second))
		s.mode.Store(r151Refuse)
		for i := range 5 {
			r151Run(t, g, fmt.Sprint("warm-", i))
			time.Sleep(600 * time.Millisecond)
		}
		before := ev.count(resilience.EventStoreFailed)
		for i := range 1000 {
			r151Run(t, g, fmt.Sprint("k-", i))
			time.Sleep(time.Millisecond)
		}
		if d := ev.count(resilience.EventStoreFailed) - before; d > 5 {
			t.Errorf("%d StoreFailed events for 1000 requests over ~1 s, failed open on a refusing store", d)
		}
	})
}

func r151Quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// (a) flips: failed open on a store that refuses writes but reads, one
// slow call (a timeout) among the refusals must not make the guard stop
// asking the store: a repeat of a key the store holds is still replayed,
// not run again on local records.
func TestReview151OneTimeoutAmongRefusalsRunsStoredKeyAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newR151Store()
		g := r151Guard(s, nil, FailOpenAfter(time.Second))
		if ran, _, _ := r151Run(t, g, "stored"); !ran {
			t.Fatal("first run")
		}
		s.mode.Store(r151Refuse)
		for i := range 5 {
			r151Run(t, g, fmt.Sprint("warm-", i))
			time.Sleep(600 * time.Millisecond)
		}
		if !g.out.isOpen() || !g.refusing.Load() {
			t.Fatalf("not open/refusing")
		}
		if ran, rec, err := r151Run(t, g, "stored"); ran || rec == nil {
			t.Fatalf("refusing store: stored key ran %v err %v", ran, err)
		}
		time.Sleep(1100 * time.Millisecond)
		r151Run(t, g, "tick") // its turn: the probe, which finds the store refusing
		s.hangNext.Store(1)   // one slow call: the store still refuses writes and reads
		r151Run(t, g, "slow-one")
		ran, _, err := r151Run(t, g, "stored")
		if ran {
			t.Errorf("after one timeout among the refusals, a repeat of a key the store holds (and would replay) ran again on local records (refusing=%v)", g.refusing.Load())
		} else {
			t.Logf("held: %v", err)
		}
	})
}

// (a): a request claimed on the store before it began refusing writes,
// whose save the store then refuses for a lease (renewals get through, as
// Redis's PEXPIRE does under OOM), on a guard failed open: the guard had
// the result, and its repeat to this process after the lease must not run
// the handler again.
func TestReview151SaveRefusedThenRepeatOnSameProcess(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newR151Store()
		g := r151Guard(s, nil, FailOpenAfter(time.Second))
		c, _, err := g.Begin(context.Background(), "s", "k", "fp-k")
		if err != nil || c == nil {
			t.Fatalf("begin: %v", err)
		}
		s.mode.Store(r151Refuse)
		for i := range 5 {
			r151Run(t, g, fmt.Sprint("warm-", i))
			time.Sleep(600 * time.Millisecond)
		}
		if !g.out.isOpen() {
			t.Fatalf("not open")
		}
		cerr := c.Complete(context.Background(), Record{Status: 201, Body: []byte("k done")})
		t.Logf("complete: %v", cerr)
		time.Sleep(2 * time.Minute) // the lease runs out
		ran, rec, err := r151Run(t, g, "k")
		if ran {
			t.Errorf("a request whose save the store refused ran again on the same process, failed open (complete: %v)", cerr)
		} else {
			t.Logf("held: rec %v err %v", rec != nil, err)
		}
	})
}
