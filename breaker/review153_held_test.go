package breaker

// review153: attacks on the vouching replica's held counts (fleet.ownProbe,
// fleet.held, the relabel in fleet.apply), with a small in-memory fleet
// store that follows the Redis script's rules (generations, half-open after
// OpenTimeout, probes, counts only while closed and only in the batch's
// generation, a batch applied once), under testing/synctest.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/resilience"
)

type r153Rec struct {
	at     time.Time
	s      Sync
	got    Fleet
	err    error
	fresh  bool   // the batch was applied (its generation the store's, first time)
	stGen  uint64 // the store's generation as the batch came
	stOpen bool   // the store was open or half-open as the batch came
}

type r153Store struct {
	mu        sync.Mutex
	gen       uint64 // 0: empty (restarted)
	prev      uint64 // the generation the last change ended (Fleet.Previous, as the Redis store says it)
	opened    time.Time
	isOpen    bool
	ok        uint32
	req, fail uint64
	counted   map[uint64][2]uint64 // per generation: requests, failures applied
	grants    map[string]time.Time
	seq       map[string]uint64
	down      bool
	delay     time.Duration // before answering, after publishing
	ignorePrb bool          // drops probe outcomes (a store that never hears them)
	log       []r153Rec
	subs      []chan Fleet
	changes   []r153Change
}

type r153Change struct {
	at    time.Time
	gen   uint64
	state resilience.State
}

func newR153Store() *r153Store {
	return &r153Store{gen: 1, counted: map[uint64][2]uint64{}, grants: map[string]time.Time{}, seq: map[string]uint64{}}
}

func (m *r153Store) publish(st resilience.State) {
	m.changes = append(m.changes, r153Change{time.Now(), m.gen, st})
	for _, c := range m.subs {
		select {
		case c <- Fleet{State: st, Generation: m.gen, Previous: m.prev}:
		default:
		}
	}
}

func (m *r153Store) open(now time.Time) {
	m.prev = m.gen
	m.gen++
	m.isOpen, m.opened = true, now
	m.req, m.fail, m.ok = 0, 0, 0
	m.grants = map[string]time.Time{}
	m.publish(resilience.StateOpen)
}

func (m *r153Store) close() {
	m.prev = m.gen
	m.gen++
	m.isOpen = false
	m.req, m.fail, m.ok = 0, 0, 0
	m.grants = map[string]time.Time{}
	m.publish(resilience.StateClosed)
}

func (m *r153Store) restartEmpty() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.gen, m.prev = 0, 0
	m.isOpen = false
	m.req, m.fail, m.ok = 0, 0, 0
	m.grants = map[string]time.Time{}
	m.seq = map[string]uint64{}
}

func (m *r153Store) setDown(d bool) { m.mu.Lock(); m.down = d; m.mu.Unlock() }

func (m *r153Store) Sync(ctx context.Context, name string, s Sync) (Fleet, error) {
	m.mu.Lock()
	if m.down {
		m.log = append(m.log, r153Rec{at: time.Now(), s: s, err: errors.New("down")})
		m.mu.Unlock()
		return Fleet{}, errors.New("r153: store down")
	}
	now := time.Now()
	p := s.Policy
	if m.gen == 0 { // restarted empty: take back the replica's view under a new generation
		m.gen = s.Generation + 1000
		if s.State != resilience.StateClosed {
			m.isOpen, m.opened = true, now.Add(-s.OpenedFor)
		}
	}
	rec := r153Rec{at: now, s: s, stGen: m.gen, stOpen: m.isOpen}
	fresh := s.Generation == m.gen || s.GenerationUnknown
	if fresh && s.Batch != "" {
		var n uint64
		fmt.Sscanf(s.Batch[len(s.Replica)+1:], "%d", &n)
		if n <= m.seq[s.Replica] {
			fresh = false
		} else {
			m.seq[s.Replica] = n
		}
	}
	rec.fresh = fresh
	gen0 := m.gen
	if fresh && (s.ProbeSuccesses > 0 || s.ProbeFailures > 0) {
		delete(m.grants, s.Replica)
	}
	if fresh && m.isOpen && !now.Before(m.opened.Add(p.OpenTimeout)) && !m.ignorePrb {
		if s.ProbeFailures > 0 {
			m.open(now)
		} else if s.ProbeSuccesses > 0 {
			m.ok += s.ProbeSuccesses
			if m.ok >= p.HalfOpenRequests {
				m.close()
			}
		}
	}
	if fresh && !m.isOpen && s.Requests > 0 && m.gen == gen0 {
		m.req += s.Requests
		m.fail += s.Failures
		c := m.counted[m.gen]
		m.counted[m.gen] = [2]uint64{c[0] + s.Requests, c[1] + s.Failures}
	}
	if !m.isOpen && m.req >= uint64(p.MinRequests) && float64(m.fail) >= p.Rate*float64(m.req) {
		m.open(now)
	}
	var got Fleet
	switch {
	case !m.isOpen:
		got = Fleet{State: resilience.StateClosed, Generation: m.gen}
	case now.Before(m.opened.Add(p.OpenTimeout)):
		got = Fleet{State: resilience.StateOpen, Generation: m.gen}
	default:
		live := 0
		mine := false
		for r, until := range m.grants {
			if !until.After(now) {
				delete(m.grants, r)
			} else if r == s.Replica {
				mine = true
			} else {
				live++
			}
		}
		if mine && !s.ProbeRunning && !s.ProbeHeld && !s.WantProbe {
			delete(m.grants, s.Replica)
			mine = false
		}
		granted := mine
		if !mine && s.WantProbe && uint32(live)+m.ok < p.HalfOpenRequests {
			m.grants[s.Replica] = now.Add(3 * p.FlushInterval)
			granted = true
		}
		got = Fleet{State: resilience.StateHalfOpen, Generation: m.gen, ProbeGranted: granted}
	}
	got.ChangedFor = 0
	got.Previous = m.prev
	rec.got = got
	m.log = append(m.log, rec)
	d := m.delay
	m.mu.Unlock()
	if d > 0 {
		time.Sleep(d)
	}
	return got, nil
}

// r153Watch is a store with Watch too.
type r153Watch struct{ *r153Store }

func (w r153Watch) Watch(ctx context.Context, name string, changed func(Fleet)) error {
	c := make(chan Fleet, 16)
	w.mu.Lock()
	w.subs = append(w.subs, c)
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		for i, s := range w.subs {
			if s == c {
				w.subs = append(w.subs[:i], w.subs[i+1:]...)
				break
			}
		}
		w.mu.Unlock()
	}()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case f := <-c:
			changed(f)
		}
	}
}

func (m *r153Store) snapshot() (gen uint64, open bool, counted map[uint64][2]uint64, log []r153Rec, changes []r153Change) {
	m.mu.Lock()
	defer m.mu.Unlock()
	counted = map[uint64][2]uint64{}
	for k, v := range m.counted {
		counted[k] = v
	}
	return m.gen, m.isOpen, counted, append([]r153Rec(nil), m.log...), append([]r153Change(nil), m.changes...)
}

var r153Fail = errors.New("r153: dependency fails")

const r153Every = 100 * time.Millisecond

// r153Vouching brings breaker b on store m to vouching in the fleet's
// half-open generation: the fleet opens on b's failures, the store goes
// down for long enough that b decides alone and its calls succeed, then
// comes back half-open in the same opening. It returns the half-open
// generation.
func r153Vouching(t *testing.T, b *Breaker, m *r153Store) uint64 {
	t.Helper()
	ctx := context.Background()
	time.Sleep(time.Millisecond) // hello
	for range 20 {
		_ = b.Execute(ctx, func(context.Context) error { return r153Fail })
		time.Sleep(time.Millisecond)
	}
	time.Sleep(r153Every + 5*time.Millisecond)
	if st := b.FleetState(); st != resilience.StateOpen {
		t.Fatalf("setup: fleet %v, want open", st)
	}
	gen, _, _, _, _ := m.snapshot()
	m.setDown(true)
	// Past the staleness bound: the replica decides alone; healthy calls.
	deadline := time.Now().Add(8 * r153Every)
	for time.Now().Before(deadline) {
		_ = b.Execute(ctx, func(context.Context) error { return nil })
		time.Sleep(5 * time.Millisecond)
	}
	if !b.fleet.cutOff() {
		t.Fatalf("setup: not deciding alone")
	}
	m.setDown(false)
	// The next flush finds the fleet half-open, in the same opening.
	for range 30 {
		time.Sleep(10 * time.Millisecond)
		if b.fleet.vouched() && resilience.State(b.fleet.state.Load()) == resilience.StateHalfOpen {
			break
		}
	}
	if !b.fleet.vouched() || resilience.State(b.fleet.state.Load()) != resilience.StateHalfOpen {
		g2, open, _, _, _ := m.snapshot()
		t.Fatalf("setup: not vouching in a half-open fleet (vouch %d gen %d state %v; store gen %d open %v)",
			b.fleet.vouch.Load(), b.fleet.gen.Load(), resilience.State(b.fleet.state.Load()), g2, open)
	}
	if g := b.fleet.gen.Load(); g != gen {
		t.Fatalf("setup: vouching in generation %d, the opening was %d", g, gen)
	}
	return gen
}

func r153New(m SharedStore, n uint32, extra ...Option) *Breaker {
	opts := []Option{
		Shared(m), FlushInterval(r153Every), OpenTimeout(300 * time.Millisecond),
		FailureRate(0.5, 5), Window(10*time.Second, 10), HalfOpenRequests(n), ConsecutiveFailures(0),
	}
	return New("r153", append(opts, extra...)...)
}

// r153After runs probes (n successes, or with bad the last a failure),
// then k calls that fail, all before the next flush; it returns how many
// of the k reached the dependency.
func r153After(t *testing.T, b *Breaker, n uint32, bad bool, k int) (ran int) {
	t.Helper()
	ctx := context.Background()
	for i := range n {
		fail := bad && i == n-1
		err := b.Execute(ctx, func(context.Context) error {
			if fail {
				return r153Fail
			}
			return nil
		})
		if err != nil && !fail {
			t.Fatalf("own probe %d refused: %v", i, err)
		}
	}
	if b.fleet.counts.Load().heldUntil == 0 {
		t.Fatalf("no held tally after the replica's %d own probes", n)
	}
	for range k {
		_ = b.Execute(ctx, func(context.Context) error { ran++; return r153Fail })
	}
	return ran
}

// Promise (1)/(2): the calls after a vouching replica's own probes count in
// the generation the probes close, exactly once, and the fleet reopens on
// them within a couple of flush intervals.
func TestReview153HeldCountsReopen(t *testing.T) {
	for _, n := range []uint32{1, 3} {
		for _, watch := range []bool{false, true} {
			t.Run(fmt.Sprintf("n%d/watch%v", n, watch), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					m := newR153Store()
					var st SharedStore = m
					if watch {
						m.delay = 5 * time.Millisecond // the Watch hears the close before the flush's answer
						st = r153Watch{m}
					}
					b := r153New(st, n)
					defer b.Close()
					half := r153Vouching(t, b, m)
					// Just past a flush: the next is ~an interval away.
					time.Sleep(2 * time.Millisecond)
					start := time.Now()
					w0 := r153Watched(b)
					ran := r153After(t, b, n, false, 6)
					defer func() {
						if watch && r153Watched(b) == w0 {
							t.Errorf("the watcher applied no change: the close was not heard by Watch first")
						}
					}()
					if ran == 0 {
						t.Fatal("no failing call reached the dependency")
					}
					time.Sleep(3 * r153Every)
					_, open, counted, log, changes := m.snapshot()
					closed := uint64(0)
					var reopenAt time.Time
					for _, c := range changes {
						if c.at.Before(start) {
							continue
						}
						if c.state == resilience.StateClosed && closed == 0 {
							closed = c.gen
						}
						if c.state == resilience.StateOpen && closed != 0 && reopenAt.IsZero() {
							reopenAt = c.at
						}
					}
					if closed == 0 {
						t.Fatalf("the probes did not close the fleet: changes %+v", changes)
					}
					if got := counted[closed]; got != [2]uint64{uint64(ran), uint64(ran)} {
						t.Errorf("counted in the closed generation %d: %v, want %d failures of %d requests", closed, got, ran, ran)
					}
					if !open || reopenAt.IsZero() || reopenAt.Sub(start) > 2*r153Every+10*time.Millisecond {
						t.Errorf("fleet did not reopen within 2 intervals of the failures: open %v, reopened %v after", open, reopenAt.Sub(start))
					}
					// Nothing made after the probes sent under the half-open generation.
					for _, r := range log {
						if r.at.After(start) && r.s.Generation == half && r.s.Requests > 0 {
							t.Errorf("a batch of %d requests sent under the half-open generation %d after the probes (at +%v)", r.s.Requests, half, r.at.Sub(start))
						}
					}
				})
			})
		}
	}
}

// A flush that fails while counts are held: one interval down, then back.
func TestReview153HeldThroughAFailedFlush(t *testing.T) {
	for _, downFor := range []int{1, 2} {
		t.Run(fmt.Sprint(downFor), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m := newR153Store()
				b := r153New(m, 1)
				defer b.Close()
				_ = r153Vouching(t, b, m)
				time.Sleep(2 * time.Millisecond)
				m.setDown(true)
				start := time.Now()
				ran := r153After(t, b, 1, false, 6)
				time.Sleep(time.Duration(downFor)*r153Every + 10*time.Millisecond)
				m.setDown(false)
				time.Sleep(3 * r153Every)
				_, open, counted, _, changes := m.snapshot()
				closed := uint64(0)
				for _, c := range changes {
					if c.at.After(start) && c.state == resilience.StateClosed {
						closed = c.gen
						break
					}
				}
				if closed == 0 {
					t.Fatalf("not closed: %+v", changes)
				}
				if got := counted[closed]; got != [2]uint64{uint64(ran), uint64(ran)} {
					t.Errorf("counted in %d: %v, want %d/%d", closed, got, ran, ran)
				}
				if !open {
					t.Errorf("fleet not reopened on %d failures", ran)
				}
			})
		})
	}
}

// A store restarted empty while counts are held: the vouching replica
// tells it closed. The store does not say the restored generation ended
// the half-open one (Fleet.Previous 0: a restore is no change it saw), so
// the held calls are dropped, as any calls of a half-open generation, and
// never counted in another (docs/shared-breaker.md, vouching; the review
// asked that they count in the restored generation).
func TestReview153HeldThroughARestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newR153Store()
		b := r153New(m, 1)
		defer b.Close()
		_ = r153Vouching(t, b, m)
		time.Sleep(2 * time.Millisecond)
		start := time.Now()
		ran := r153After(t, b, 1, false, 6)
		m.restartEmpty()
		time.Sleep(3 * r153Every)
		gen, open, counted, log, _ := m.snapshot()
		var restored uint64
		for _, r := range log {
			if r.at.After(start) && r.err == nil {
				restored = r.stGen
				break
			}
		}
		if got := counted[restored]; got != [2]uint64{} {
			t.Errorf("counted in restored generation %d: %v, want none of the %d held (store gen now %d open %v, counted %v)", restored, got, ran, gen, open, counted)
		}
		for g, n := range counted {
			if g != 1 && g != restored {
				t.Errorf("counted in generation %d: %v", g, n)
			}
		}
	})
}

// Close while counts are held: its last flushes send the probes, then the
// held counts in the generation they closed.
func TestReview153CloseWhileHeld(t *testing.T) {
	for _, n := range []uint32{1, 3} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m := newR153Store()
				b := r153New(m, n)
				_ = r153Vouching(t, b, m)
				time.Sleep(2 * time.Millisecond)
				start := time.Now()
				ran := r153After(t, b, n, false, 3) // under MinRequests: the fleet stays closed
				if err := b.Close(); err != nil {
					t.Fatalf("Close: %v", err)
				}
				if d := time.Since(start); d > 2*r153Every {
					t.Errorf("Close took %v", d)
				}
				_, _, counted, log, changes := m.snapshot()
				closed := uint64(0)
				for _, c := range changes {
					if !c.at.Before(start) && c.state == resilience.StateClosed {
						closed = c.gen
						break
					}
				}
				if closed == 0 {
					t.Fatalf("Close's flush did not close the fleet: %+v", changes)
				}
				if got := counted[closed]; got != [2]uint64{uint64(ran), uint64(ran)} {
					var after []Sync
					for _, r := range log {
						if r.at.After(start) {
							after = append(after, r.s)
						}
					}
					t.Errorf("counted in %d: %v, want %d/%d; syncs after: %+v", closed, got, ran, ran, after)
				}
			})
		})
	}
}

// An own probe's failure reopens the fleet, and the held calls are not
// counted in any later generation.
func TestReview153OwnProbeFailureReopens(t *testing.T) {
	for _, n := range []uint32{1, 3} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m := newR153Store()
				b := r153New(m, n)
				defer b.Close()
				half := r153Vouching(t, b, m)
				time.Sleep(2 * time.Millisecond)
				start := time.Now()
				_ = r153After(t, b, n, true, 2)
				time.Sleep(3 * r153Every)
				gen, open, counted, _, changes := m.snapshot()
				var first r153Change
				for _, c := range changes {
					if c.at.After(start) {
						first = c
						break
					}
				}
				if first.state != resilience.StateOpen || first.gen != half+1 {
					t.Errorf("own probe's failure: first change %+v, want open %d", first, half+1)
				}
				for g, c := range counted {
					if g > half && c != ([2]uint64{}) {
						t.Errorf("counts %v in generation %d after a failed probe (store gen %d open %v)", c, g, gen, open)
					}
				}
			})
		})
	}
}

// A hold never outlives three flush intervals: a store that never hears
// the probes (the fleet stays half-open) gets the calls' counts once the
// hold lapses; and no call is refused meanwhile.
func TestReview153HoldLapses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newR153Store()
		m.ignorePrb = true
		b := r153New(m, 1)
		defer b.Close()
		half := r153Vouching(t, b, m)
		time.Sleep(2 * time.Millisecond)
		start := time.Now()
		_ = r153After(t, b, 1, false, 0)
		refused := 0
		for range 40 {
			if err := b.Execute(context.Background(), func(context.Context) error { return nil }); err != nil {
				refused++
			}
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(2 * r153Every)
		_, _, _, log, _ := m.snapshot()
		var sentAt time.Duration = -1
		for _, r := range log {
			if r.at.After(start) && r.s.Requests > 0 {
				sentAt = r.at.Sub(start)
				if r.s.Generation != half {
					t.Errorf("lapsed hold sent under %d, half-open %d", r.s.Generation, half)
				}
				break
			}
		}
		if sentAt < 0 || sentAt > 4*r153Every {
			t.Errorf("held counts first sent %v after the probe, want within ~3 intervals", sentAt)
		}
		if refused > 0 {
			t.Errorf("%d healthy calls refused during the hold", refused)
		}
	})
}

// A replica that does not vouch (no success while alone) has no hold:
// nothing lost, and its counts go in the generation they were made in.
func TestReview153NoVouchNoHold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newR153Store()
		b := r153New(m, 1)
		defer b.Close()
		ctx := context.Background()
		time.Sleep(time.Millisecond)
		ok := 0
		for range 200 {
			if b.Execute(ctx, func(context.Context) error { return nil }) == nil {
				ok++
			}
			if c := b.fleet.counts.Load(); c.heldUntil != 0 {
				t.Fatal("a held tally on a replica that does not vouch")
			}
			time.Sleep(time.Millisecond)
		}
		time.Sleep(2 * r153Every)
		_, _, counted, _, _ := m.snapshot()
		if got := counted[1]; got != [2]uint64{uint64(ok), 0} {
			t.Errorf("counted %v, want %d/0", got, ok)
		}
	})
}

// Concurrent calls around the swap (run with -race): nothing counted in a
// wrong generation, the closed generation's count never above the calls
// that reached the dependency after the first probe.
func TestReview153ConcurrentAroundSwap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newR153Store()
		b := r153New(m, 3)
		defer b.Close()
		half := r153Vouching(t, b, m)
		time.Sleep(2 * time.Millisecond)
		start := time.Now()
		var mu sync.Mutex
		ran := 0
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for range 30 {
					_ = b.Execute(context.Background(), func(context.Context) error {
						mu.Lock()
						ran++
						mu.Unlock()
						time.Sleep(time.Millisecond)
						return nil
					})
				}
			})
		}
		wg.Wait()
		time.Sleep(3 * r153Every)
		_, _, counted, log, _ := m.snapshot()
		total := uint64(0)
		for g, c := range counted {
			if g > half {
				total += c[0]
			}
		}
		if total > uint64(ran) || total == 0 {
			t.Errorf("counted %d after the half-open generation, %d calls ran", total, ran)
		}
		for _, r := range log {
			if r.at.After(start) && r.s.Generation == half && r.fresh && r.s.Requests > 0 && !r.stOpen {
				t.Errorf("half-open counts applied: %+v", r.s)
			}
		}
		t.Logf("ran %d, counted after %d (%v)", ran, total, counted)
	})
}

// The fleet closes, opens and closes again (through other replicas) while
// this vouching replica's flushes fail, all within its hold: its held
// calls, made in the half-open generation just after its probes, before
// the fleet closed the first time, must not be counted in the later
// closed generation (an outage's failures in a recovered fleet).
func TestReview153HeldNotCountedInALaterGeneration(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newR153Store()
		b := r153New(m, 1)
		defer b.Close()
		half := r153Vouching(t, b, m)
		time.Sleep(2 * time.Millisecond)
		m.setDown(true) // this replica cut off from the store
		start := time.Now()
		ran := r153After(t, b, 1, false, 6)
		// Meanwhile the other replicas: a probe closes the fleet (half+1),
		// failures reopen it (half+2), a probe closes it again (half+3).
		m.mu.Lock()
		m.close()
		m.open(time.Now())
		m.close()
		later := m.gen
		m.mu.Unlock()
		time.Sleep(r153Every + r153Every/2)
		m.setDown(false)
		time.Sleep(3 * r153Every)
		_, _, counted, log, _ := m.snapshot()
		if got := counted[later]; got[0] != 0 {
			var after []string
			for _, r := range log {
				if r.at.After(start) {
					after = append(after, fmt.Sprintf("+%v gen %d req %d fail %d ok %d err %v -> %+v", r.at.Sub(start), r.s.Generation, r.s.Requests, r.s.Failures, r.s.ProbeSuccesses, r.err, r.got))
				}
			}
			t.Errorf("%d calls made in half-open generation %d (%d ran) counted in generation %d, closed after it had opened again: %v\n%v", got[0], half, ran, later, got, after)
		}
	})
}

// A short window (1.5 flush intervals): a replica's counts that are not
// held reach the store; the held ones too (they wait an interval more).
func TestReview153HeldShortWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newR153Store()
		b := r153New(m, 1, Window(150*time.Millisecond, 3))
		defer b.Close()
		_ = r153Vouching(t, b, m)
		time.Sleep(2 * time.Millisecond)
		start := time.Now()
		ran := r153After(t, b, 1, false, 4) // under MinRequests
		time.Sleep(3 * r153Every)
		_, _, counted, _, changes := m.snapshot()
		closed := uint64(0)
		for _, c := range changes {
			if c.at.After(start) && c.state == resilience.StateClosed {
				closed = c.gen
				break
			}
		}
		if got := counted[closed]; got != [2]uint64{uint64(ran), uint64(ran)} {
			t.Errorf("counted in %d: %v, want %d/%d", closed, got, ran, ran)
		}
		// Baseline: the same window, calls not held, after the close.
		ok := 0
		for range 4 {
			if b.Execute(context.Background(), func(context.Context) error { return nil }) == nil {
				ok++
			}
		}
		time.Sleep(2 * r153Every)
		_, _, counted2, _, _ := m.snapshot()
		gen := b.fleet.gen.Load()
		t.Logf("baseline: gen %d counted %v (ok %d)", gen, counted2[gen], ok)
	})
}

func r153Watched(b *Breaker) uint64 {
	b.fleet.mu.Lock()
	defer b.fleet.mu.Unlock()
	return b.fleet.watched
}

// The store answers open in the same generation after the replica's own
// probes (a server clock stepped back: the script moves a future opening
// to now, and the fleet is open again, not half-open): the held counts are
// then sent under that opening (the store drops them).
func TestReview153HeldNotSentUnderAnOpening(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newR153Store()
		b := r153New(m, 1)
		defer b.Close()
		half := r153Vouching(t, b, m)
		time.Sleep(2 * time.Millisecond)
		start := time.Now()
		m.mu.Lock()
		m.ignorePrb = true
		m.opened = time.Now() // open again, same generation
		m.mu.Unlock()
		_ = r153After(t, b, 1, false, 4)
		time.Sleep(3 * r153Every)
		_, _, _, log, _ := m.snapshot()
		for _, r := range log {
			if r.at.After(start) && r.s.Generation == half && r.s.Requests > 0 && r.got.State == resilience.StateOpen {
				t.Errorf("held counts (%d requests) sent under the opening %d at +%v", r.s.Requests, half, r.at.Sub(start))
			}
		}
	})
}
