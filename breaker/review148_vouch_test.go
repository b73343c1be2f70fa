package breaker_test

// review148: attacks on the shared breaker's vouching (breaker/shared.go),
// against a fleet store double of the reviewer's own (fakeFleet below),
// which follows the rules docs/shared-breaker.md gives the Redis script:
// counts only while closed and in their generation, a batch applied once,
// probe outcomes only for the half-open generation, grants one per replica
// up to HalfOpenRequests, a change published to the watchers.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/resilience"
)

var errR148Store = errors.New("review148: store down")
var errR148Dep = resilience.Terminal(errors.New("review148: dependency down"))

type r148Report struct {
	gen       uint64
	ok, bad   uint32
	replica   string
	halfOpen  bool
	applied   bool
	stateSent resilience.State
}

type fakeFleet struct {
	mu       sync.Mutex
	down     map[string]bool // replica id -> Sync fails (set by name of breaker's replica unknown: use all)
	allDown  bool
	lose     bool // apply the Sync but lose its answer
	open     bool
	opened   time.Time
	gen      uint64
	ok       uint32
	reqs     uint64
	fails    uint64
	grants   map[string]time.Time
	applied  map[string]bool
	reports  []r148Report
	changes  []string
	watchers []func(breaker.Fleet)
	syncs    int
	failNext int // the next failNext Syncs fail
}

func newFakeFleet() *fakeFleet {
	return &fakeFleet{gen: 1, grants: map[string]time.Time{}, applied: map[string]bool{}, down: map[string]bool{}}
}

func (s *fakeFleet) setDown(v bool) { s.mu.Lock(); s.allDown = v; s.mu.Unlock() }

// openNow opens the fleet under a new generation, as of now.
func (s *fakeFleet) openNow() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.change(true)
}

func (s *fakeFleet) change(open bool) {
	s.open = open
	s.gen++
	s.opened = time.Now()
	s.ok, s.reqs, s.fails = 0, 0, 0
	clear(s.grants)
	st := resilience.StateClosed
	if open {
		st = resilience.StateOpen
	}
	s.changes = append(s.changes, fmt.Sprintf("%v gen %d at %v", st, s.gen, time.Now().Format("15:04:05.000")))
	f := breaker.Fleet{State: st, Generation: s.gen}
	for _, w := range s.watchers {
		go w(f)
	}
}

func (s *fakeFleet) state() (resilience.State, uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stateLocked(time.Now()), s.gen
}

func (s *fakeFleet) stateLocked(now time.Time) resilience.State {
	switch {
	case !s.open:
		return resilience.StateClosed
	default:
		return resilience.StateOpen
	}
}

func (s *fakeFleet) Sync(ctx context.Context, name string, sy breaker.Sync) (breaker.Fleet, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.syncs++
	if s.allDown || s.down[sy.Replica] {
		return breaker.Fleet{}, errR148Store
	}
	if s.failNext > 0 {
		s.failNext--
		return breaker.Fleet{}, errR148Store
	}
	now := time.Now()
	p := sy.Policy
	fresh := sy.Generation == s.gen || sy.GenerationUnknown
	if sy.Batch != "" {
		if s.applied[sy.Batch] {
			fresh = false
		} else if fresh {
			s.applied[sy.Batch] = true
		}
	}
	half := s.open && !now.Before(s.opened.Add(p.OpenTimeout))
	if sy.ProbeSuccesses+sy.ProbeFailures > 0 {
		s.reports = append(s.reports, r148Report{gen: sy.Generation, ok: sy.ProbeSuccesses, bad: sy.ProbeFailures,
			replica: sy.Replica, halfOpen: half, applied: fresh && half, stateSent: sy.State})
		delete(s.grants, sy.Replica)
	}
	gen0 := s.gen
	if fresh && half {
		if sy.ProbeFailures > 0 {
			s.change(true)
		} else if sy.ProbeSuccesses > 0 {
			s.ok += sy.ProbeSuccesses
			if s.ok >= p.HalfOpenRequests {
				s.change(false)
			}
		}
	}
	if fresh && !s.open && s.gen == gen0 && sy.Requests > 0 {
		s.reqs += sy.Requests
		s.fails += sy.Failures
		if s.reqs >= uint64(p.MinRequests) && float64(s.fails) >= p.Rate*float64(s.reqs) {
			s.change(true)
		}
	}
	out := breaker.Fleet{Generation: s.gen, ChangedFor: max(now.Sub(s.opened), time.Millisecond)}
	if !s.open {
		out.State = resilience.StateClosed
		return out, s.lost()
	}
	if now.Before(s.opened.Add(p.OpenTimeout)) {
		out.State = resilience.StateOpen
		return out, s.lost()
	}
	out.State = resilience.StateHalfOpen
	live, mine := 0, false
	for r, until := range s.grants {
		if !until.After(now) {
			delete(s.grants, r)
			continue
		}
		if r == sy.Replica {
			mine = true
		} else {
			live++
		}
	}
	if sy.Generation != s.gen {
		sy.ProbeRunning, sy.ProbeHeld = false, false
	}
	if mine && !sy.ProbeRunning && !sy.ProbeHeld && !sy.WantProbe {
		delete(s.grants, sy.Replica)
		mine = false
	}
	if mine {
		out.ProbeGranted = true
	} else if sy.WantProbe && uint32(live)+s.ok < p.HalfOpenRequests {
		s.grants[sy.Replica] = now.Add(3 * p.FlushInterval)
		out.ProbeGranted = true
	}
	return out, s.lost()
}

func (s *fakeFleet) lost() error {
	if s.lose {
		return errR148Store
	}
	return nil
}

func (s *fakeFleet) Watch(ctx context.Context, name string, changed func(breaker.Fleet)) error {
	s.mu.Lock()
	s.watchers = append(s.watchers, changed)
	s.mu.Unlock()
	<-ctx.Done()
	return ctx.Err()
}

// r148Dep is a dependency that counts the calls reaching it.
type r148Dep struct {
	failing atomic.Bool
	calls   atomic.Int64
	fails   atomic.Int64
}

func (d *r148Dep) op(ctx context.Context) error {
	d.calls.Add(1)
	if d.failing.Load() {
		d.fails.Add(1)
		return errR148Dep
	}
	return nil
}

// Promise (2): a vouching replica whose own calls fail as the fleet is
// half-open sends the failing dependency no more than it would deciding
// alone, and the fleet reopens at once (within a flush or two). The
// dependency fails from the moment the store answers again; the replica
// calls every 40 ms, so that its own breaker is still closed at its first
// flush through (it vouches). Variants: ConsecutiveFailures on (5), and
// off with FailureRate alone (min 20): a local breaker then needs 20 calls
// to open.
func TestReview148VouchThenFailureReopensPromptly(t *testing.T) {
	for _, tc := range []struct {
		name        string
		consecutive uint32
		localBudget int64 // failing calls a replica deciding alone sends before its own breaker opens
	}{
		{"consecutive5", 5, 5},
		{"rateOnly", 0, 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				st := newFakeFleet()
				st.openNow() // the fleet is open, gen 2
				dep := &r148Dep{}
				b := breaker.New("dep", breaker.Shared(st), breaker.FlushInterval(100*time.Millisecond),
					breaker.OpenTimeout(time.Second), breaker.FailureRate(0.5, 20),
					breaker.ConsecutiveFailures(tc.consecutive), breaker.Window(10*time.Second, 10))
				defer b.Close()
				ctx := context.Background()
				call := func() error { return b.Execute(ctx, dep.op) }
				time.Sleep(50 * time.Millisecond)
				if b.FleetState() != resilience.StateOpen {
					t.Fatalf("fleet %v, want open", b.FleetState())
				}
				st.setDown(true)
				// 3 s of outage of the store: the replica decides alone
				// after the open timeout and serves the healthy dependency.
				for range 75 {
					_ = call()
					time.Sleep(40 * time.Millisecond)
				}
				if dep.calls.Load() == 0 {
					t.Fatal("the replica never decided alone")
				}
				dep.failing.Store(true)
				st.setDown(false)
				start := time.Now()
				var reopened time.Duration
				var sawVouch bool
				for range 50 { // 2 s
					_ = call()
					if b.FleetState() == resilience.StateClosed {
						if s, g := st.state(); s != resilience.StateClosed && g == 2 {
							sawVouch = true
						}
					}
					if reopened == 0 {
						if s, g := st.state(); s == resilience.StateOpen && g > 2 {
							reopened = time.Since(start)
						}
					}
					time.Sleep(40 * time.Millisecond)
				}
				// A replica deciding alone: localBudget failures, then a
				// probe each open timeout (2 in 2 s).
				if got := dep.fails.Load(); got > tc.localBudget+2 {
					t.Errorf("%d calls sent to the failing dependency in 2 s; alone, the replica would have sent %d", got, tc.localBudget+2)
				}
				st.mu.Lock()
				defer st.mu.Unlock()
				t.Logf("vouched: %v; failing calls sent %d, reopened after %v, reports %+v changes %v", sawVouch, dep.fails.Load(), reopened, st.reports, st.changes)
				if !sawVouch {
					t.Logf("the replica did not vouch: nothing to judge of the reopening")
					return
				}
				if reopened == 0 || reopened > 300*time.Millisecond {
					t.Errorf("fleet reopened %v after the dependency failed (changes %v), want within 300 ms", reopened, st.changes)
				}
			})
		})
	}
}

// Promise (3): a vouching replica reports at most HalfOpenRequests own
// probes in a half-open generation ("the outcomes of its first
// HalfOpenRequests calls while the fleet is half-open are the fleet's
// probes"), whatever the store does meanwhile: here a store whose flushes
// fail every other time (a flapping store) after the vouch.
func TestReview148FlappingStoreOwnProbesAtMostHalfOpenRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const h = 3
		st := newFakeFleet()
		st.openNow()
		dep := &r148Dep{}
		b := breaker.New("dep", breaker.Shared(st), breaker.FlushInterval(100*time.Millisecond),
			breaker.OpenTimeout(time.Second), breaker.FailureRate(0.5, 20), breaker.HalfOpenRequests(h),
			breaker.Window(10*time.Second, 10))
		defer b.Close()
		ctx := context.Background()
		time.Sleep(50 * time.Millisecond)
		st.setDown(true)
		for range 300 {
			_ = b.Execute(ctx, dep.op)
			time.Sleep(10 * time.Millisecond)
		}
		st.setDown(false)
		// Let the replica vouch (no call meanwhile: its own probes stay).
		time.Sleep(150 * time.Millisecond)
		if b.FleetState() != resilience.StateClosed {
			t.Fatalf("replica not vouching after the store's return: fleet %v", b.FleetState())
		}
		// Calls succeed, one each 50 ms, while the store flaps (two flushes
		// of four fail) for 2 s.
		for i := range 40 {
			st.setDown(i%4 == 1 || i%4 == 2)
			_ = b.Execute(ctx, dep.op)
			time.Sleep(50 * time.Millisecond)
		}
		st.setDown(false)
		time.Sleep(300 * time.Millisecond)
		st.mu.Lock()
		defer st.mu.Unlock()
		per := map[uint64]uint32{}
		for _, r := range st.reports {
			per[r.gen] += r.ok + r.bad
		}
		for g, n := range per {
			if n > h {
				t.Errorf("generation %d: %d own probe outcomes reported, more than HalfOpenRequests %d (reports %+v)", g, n, h, st.reports)
			}
		}
		t.Logf("reports %+v changes %v", st.reports, st.changes)
	})
}

// Promise (4): no deadlock between the core's lock, the fleet's lock and
// the wait queue, and no data race (run with -race), with several replicas
// of one store that flaps (flushes fail at random, answers lost, the fleet
// opened at random), many goroutines calling and waiting (Breaker.Wait, as
// pipeline.WaitWhenOpen does), and Check/State/FleetState read meanwhile.
// Real time, about 2 s.
func TestReview148FlappingStoreNoDeadlock(t *testing.T) {
	st := newFakeFleet()
	dep := &r148Dep{}
	var replicas []*breaker.Breaker
	for range 3 {
		b := breaker.New("dep", breaker.Shared(st), breaker.FlushInterval(20*time.Millisecond),
			breaker.OpenTimeout(60*time.Millisecond), breaker.FailureRate(0.3, 10), breaker.HalfOpenRequests(2),
			breaker.ConsecutiveFailures(4), breaker.Window(time.Second, 10))
		replicas = append(replicas, b)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	// The store flaps.
	wg.Go(func() {
		tk := time.NewTicker(7 * time.Millisecond)
		defer tk.Stop()
		i := 0
		for {
			select {
			case <-stop:
				st.setDown(false)
				return
			case <-tk.C:
			}
			i++
			st.mu.Lock()
			st.allDown = i%5 == 0 || i%7 == 0
			st.lose = i%11 == 0
			st.mu.Unlock()
			if i%40 == 0 {
				st.openNow()
			}
			dep.failing.Store(i%60 < 15)
		}
	})
	var calls, rejected atomic.Int64
	for g := range 24 {
		b := replicas[g%len(replicas)]
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(20+g)*time.Millisecond)
				for range 3 {
					err := b.Execute(ctx, func(ctx context.Context) error {
						if g%5 == 0 {
							select {
							case <-time.After(3 * time.Millisecond):
							case <-ctx.Done():
								return ctx.Err()
							}
						}
						return dep.op(ctx)
					})
					calls.Add(1)
					if !breaker.IsRejection(err) {
						break
					}
					rejected.Add(1)
					if b.Wait(ctx, err) != nil {
						break
					}
				}
				cancel()
				_ = b.Check()
				_ = b.State()
				_ = b.FleetState()
			}
		})
	}
	time.Sleep(2 * time.Second)
	close(stop)
	done := make(chan struct{})
	go func() {
		wg.Wait()
		for _, b := range replicas {
			_ = b.Close()
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		buf := make([]byte, 1<<20)
		n := runtimeStack(buf)
		t.Fatalf("callers or Close did not return within 5 s of the end: deadlock?\n%s", buf[:n])
	}
	t.Logf("calls %d, rejected %d, dependency calls %d, syncs %d", calls.Load(), rejected.Load(), dep.calls.Load(), st.syncs)
}

// Promise (2) (review147's rule: "Only the calls it admitted while deciding
// alone vouch", not calls in flight as the fleet opened): a replica whose
// flushes fail, deciding alone in a closed fleet, busy (callers in a tight
// loop), hears an opening by Watch; its flushes get through again 30 ms
// later. It made no call while deciding alone in that opening (it went by
// the opening it had just heard of), so it must not vouch against it, and
// must send the dependency, failing from the opening on, nothing. Each
// round: the fleet closed, the replica's flushes failing, an opening
// published, the flushes back. Real time, about 2 s.
func TestReview148OpeningHeardByWatchWhileBusyNoVouch(t *testing.T) {
	st := newFakeFleet()
	dep := &r148Dep{}
	b := breaker.New("dep", breaker.Shared(st), breaker.FlushInterval(20*time.Millisecond),
		breaker.OpenTimeout(time.Second), breaker.FailureRate(0.5, 10), breaker.ConsecutiveFailures(5),
		breaker.Window(10*time.Second, 10))
	defer b.Close()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var failingSent, sentAsClosed atomic.Int64
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				_ = b.Execute(context.Background(), func(context.Context) error {
					if dep.failing.Load() {
						failingSent.Add(1)
						if b.FleetState() == resilience.StateClosed {
							sentAsClosed.Add(1) // the replica vouched, or had not heard the opening yet
						}
						return errR148Dep
					}
					return nil
				})
			}
		})
	}
	defer func() { close(stop); wg.Wait() }()
	time.Sleep(60 * time.Millisecond)
	vouched := 0
	rounds := 0
	var sent []int64
	for round := 0; round < 20; round++ {
		rounds++
		// The fleet closed, the dependency healthy, the replica's flushes
		// failing: it decides alone in the closed generation.
		dep.failing.Store(false)
		st.mu.Lock()
		if st.open {
			st.change(false)
		}
		st.mu.Unlock()
		time.Sleep(60 * time.Millisecond) // heard (watch, flush)
		st.setDown(true)
		time.Sleep(60 * time.Millisecond) // flushes fail: down
		// The fleet opens (another replica's flushes), published at once;
		// the dependency fails 2 ms after.
		st.openNow()
		_, g := st.state()
		time.Sleep(2 * time.Millisecond) // the calls in flight as it opened succeed
		before := failingSent.Load()
		dep.failing.Store(true)
		fsOpen := b.FleetState()
		time.Sleep(28 * time.Millisecond)
		mid, midClosed := failingSent.Load()-before, sentAsClosed.Load()
		st.setDown(false)
		time.Sleep(60 * time.Millisecond) // the first flush through: rejoin
		fs := b.FleetState()
		s, g2 := st.state()
		n := failingSent.Load() - before
		sent = append(sent, n)
		if n > 0 {
			t.Logf("round %d: FleetState %v 2 ms after the opening, %d failing calls before the store came back, %d after; FleetState %v after, store %v gen %d (opened %d); own %v", round, fsOpen, mid, n-mid, fs, s, g2, g, b.Counts())
		}
		// After the store's return, a replica going by the opening it heard
		// 30 ms before sends nothing as if the fleet were closed: such a
		// call is a vouch's (or the FleetState says closed). A call the
		// replica admitted before it heard the opening may run its
		// operation later, its goroutine descheduled for tens of ms under
		// the race detector on 2 cores (1 of 12 runs): it is sent whatever
		// the replica hears meanwhile, and the opening is in its view.
		if vouch := sentAsClosed.Load() - midClosed; s == resilience.StateOpen && g2 == g && (vouch > 0 || fs == resilience.StateClosed) {
			vouched++
			t.Errorf("round %d: the replica vouched against opening %d, heard by Watch 30 ms before its flushes got through, having made no call alone in it: %d calls sent to the failing dependency after (FleetState %v)", round, g, n-mid, fs)
		}
	}
	t.Logf("%d rounds, vouched in %d; calls sent to the failing dependency per round: %v", rounds, vouched, sent)
}

// Promise (1) and the doc's rule that "the outcomes of its first
// HalfOpenRequests calls while the fleet is half-open are the fleet's
// probes": with HalfOpenRequests 3, a vouching replica's calls succeed,
// succeed, succeed, then one fails. The fleet must close on the first
// three. Here one flush of the replica's fails between its first and
// second call (a flapping store): the flush after it, a rejoin, vouches
// again and refills the own probes, so that the fourth call's failure is
// reported as a probe too, with the second and third successes, and the
// store reopens the fleet (a failure first) on a dependency whose first
// HalfOpenRequests probes all succeeded: every replica refuses its calls
// for another OpenTimeout.
func TestReview148FlapRefillsOwnProbesAndReopens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const h = 3
		st := newFakeFleet()
		st.openNow()
		dep := &r148Dep{}
		b := breaker.New("dep", breaker.Shared(st), breaker.FlushInterval(100*time.Millisecond),
			breaker.OpenTimeout(time.Second), breaker.FailureRate(0.5, 20), breaker.HalfOpenRequests(h),
			breaker.Window(10*time.Second, 10))
		defer b.Close()
		ctx := context.Background()
		time.Sleep(50 * time.Millisecond)
		st.setDown(true)
		for range 30 { // 3 s alone, serving
			_ = b.Execute(ctx, dep.op)
			time.Sleep(100 * time.Millisecond)
		}
		st.setDown(false)
		time.Sleep(150 * time.Millisecond) // the first flush through: it vouches, the fleet half-open
		if b.FleetState() != resilience.StateClosed {
			t.Fatalf("replica not vouching after the store's return: fleet %v", b.FleetState())
		}
		_ = b.Execute(ctx, dep.op) // probe 1: success
		time.Sleep(100 * time.Millisecond)
		st.mu.Lock()
		st.failNext = 1 // one flush lost
		st.mu.Unlock()
		time.Sleep(100 * time.Millisecond)
		_ = b.Execute(ctx, dep.op)         // probe 2: success
		time.Sleep(100 * time.Millisecond) // the flush after the lost one: a rejoin
		_ = b.Execute(ctx, dep.op)         // probe 3: success
		dep.failing.Store(true)
		_ = b.Execute(ctx, dep.op) // the fourth call: not a probe
		dep.failing.Store(false)
		time.Sleep(300 * time.Millisecond)
		st.mu.Lock()
		reports, changes := append([]r148Report(nil), st.reports...), append([]string(nil), st.changes...)
		reopened := st.open
		st.mu.Unlock()
		var rejected int
		for range 20 { // the next 0.5 s
			if err := b.Execute(ctx, dep.op); breaker.IsRejection(err) {
				rejected++
			}
			time.Sleep(25 * time.Millisecond)
		}
		t.Logf("reports %+v; changes %v; rejected after: %d of 20", reports, changes, rejected)
		if reopened {
			t.Errorf("the fleet reopened on the replica's 4th call's failure, its first %d calls in the half-open state having succeeded; %d of 20 calls then refused", h, rejected)
		}
	})
}
