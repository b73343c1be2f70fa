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

// r142Store is a minimal in-memory SharedStore, written from the docs.
type r142Store struct {
	mu        sync.Mutex
	empty     bool
	st        resilience.State
	gen       uint64
	changedAt time.Time
	reqs      []r142Count
	batches   map[string]bool
	grants    map[string]time.Time
	probeOK   uint32
	granted   uint32
	hangUntil time.Time
	failing   bool
	syncs     int
}

type r142Count struct {
	at         time.Time
	req, fails uint64
}

var r142Gen atomic.Uint64

func newR142Store() *r142Store {
	return &r142Store{empty: true, batches: map[string]bool{}, grants: map[string]time.Time{}}
}

func (m *r142Store) State() resilience.State {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.st
}

func (m *r142Store) set(st resilience.State, now time.Time) {
	m.st = st
	m.gen = r142Gen.Add(1)
	m.changedAt = now
	m.reqs = nil
	m.grants = map[string]time.Time{}
	m.probeOK, m.granted = 0, 0
}

func (m *r142Store) Sync(ctx context.Context, name string, s breaker.Sync) (breaker.Fleet, error) {
	m.mu.Lock()
	hang, failing := m.hangUntil, m.failing
	m.mu.Unlock()
	if d := time.Until(hang); d > 0 {
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return breaker.Fleet{}, ctx.Err()
		}
	}
	if failing {
		return breaker.Fleet{}, errors.New("store down")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.syncs++
	now := time.Now()
	p := s.Policy
	if m.empty {
		m.empty = false
		m.set(resilience.StateClosed, now)
		if s.State != resilience.StateClosed {
			m.set(resilience.StateOpen, now.Add(-s.OpenedFor))
		}
	}
	if m.st == resilience.StateOpen && now.Sub(m.changedAt) >= p.OpenTimeout {
		m.set(resilience.StateHalfOpen, now)
	}
	if s.Batch != "" && !m.batches[s.Batch] {
		m.batches[s.Batch] = true
		ok := s.Generation == m.gen
		if s.GenerationUnknown {
			ok = s.CountsAge == 0 || now.Add(-s.CountsAge).After(m.changedAt) || now.Add(-s.CountsAge).Equal(m.changedAt)
		}
		if ok && m.st == resilience.StateClosed && s.Requests > 0 {
			m.reqs = append(m.reqs, r142Count{now, s.Requests, s.Failures})
		}
		if s.Generation == m.gen && m.st == resilience.StateHalfOpen {
			if s.ProbeFailures > 0 {
				m.set(resilience.StateOpen, now)
			} else {
				m.probeOK += s.ProbeSuccesses
				if m.probeOK >= p.HalfOpenRequests {
					m.set(resilience.StateClosed, now)
				}
			}
		}
	}
	if m.st == resilience.StateClosed {
		var r, f uint64
		kept := m.reqs[:0]
		for _, c := range m.reqs {
			if now.Sub(c.at) < p.Window {
				kept = append(kept, c)
				r += c.req
				f += c.fails
			}
		}
		m.reqs = kept
		if r >= uint64(p.MinRequests) && float64(f) >= p.Rate*float64(r) {
			m.set(resilience.StateOpen, now)
		}
	}
	granted := false
	if m.st == resilience.StateHalfOpen {
		for id, at := range m.grants {
			if now.Sub(at) > p.ProbeTimeout {
				delete(m.grants, id)
			}
		}
		if _, held := m.grants[s.Replica]; held {
			if !s.WantProbe && !s.ProbeHeld && !s.ProbeRunning {
				delete(m.grants, s.Replica)
			} else {
				granted = true
				if s.ProbeRunning {
					m.grants[s.Replica] = now
				}
			}
		} else if s.WantProbe && m.granted < p.HalfOpenRequests {
			m.grants[s.Replica] = now
			m.granted++
			granted = true
		}
	}
	return breaker.Fleet{State: m.st, Generation: m.gen, ProbeGranted: granted, ChangedFor: max(now.Sub(m.changedAt), time.Nanosecond)}, nil
}

var errR142Dead = errors.New("dependency down")

// A crash loop: replicas started one after another while the fleet is open.
// None may send a call to the dependency while the store holds the fleet open.
func TestReview142CrashLoopNewReplicasRespectOpenFleet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newR142Store()
		opts := func() []breaker.Option {
			return []breaker.Option{breaker.Shared(st), breaker.FailureRate(0.5, 5), breaker.Window(10*time.Second, 10),
				breaker.OpenTimeout(2 * time.Second), breaker.FlushInterval(100 * time.Millisecond)}
		}
		var whileOpen, reached atomic.Int64
		dep := func(ctx context.Context) error {
			reached.Add(1)
			if st.State() == resilience.StateOpen {
				whileOpen.Add(1)
			}
			return errR142Dead
		}
		// First replica opens the fleet.
		a := breaker.New("svc", opts()...)
		for i := 0; i < 20; i++ {
			_ = a.Execute(context.Background(), dep)
			time.Sleep(10 * time.Millisecond)
		}
		time.Sleep(300 * time.Millisecond)
		if st.State() != resilience.StateOpen {
			t.Fatalf("fleet not open: %v", st.State())
		}
		whileOpen.Store(0)
		// Crash loop: each new replica calls at once, then every ms, 150 ms, then dies.
		for k := 0; k < 40; k++ {
			b := breaker.New("svc", opts()...)
			for i := 0; i < 150; i++ {
				_ = b.Execute(context.Background(), dep)
				time.Sleep(time.Millisecond)
			}
			b.Close()
			time.Sleep(7 * time.Millisecond)
		}
		a.Close()
		if n := whileOpen.Load(); n > 0 {
			t.Errorf("%d calls reached the dependency while the fleet was open (reached %d in all)", n, reached.Load())
		}
		t.Logf("reached %d", reached.Load())
	})
}

// A store hanging 1 s as a replica starts: its first calls wait at most
// FlushInterval/10, none fails because of the store.
func TestReview142HangingStoreAtStart(t *testing.T) {
	for _, withDeadline := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			st := newR142Store()
			st.hangUntil = time.Now().Add(time.Second)
			b := breaker.New("svc", breaker.Shared(st), breaker.FailureRate(0.5, 5), breaker.Window(10*time.Second, 10),
				breaker.FlushInterval(100*time.Millisecond))
			defer b.Close()
			var wg sync.WaitGroup
			var worst atomic.Int64
			var fails atomic.Int64
			for g := 0; g < 8; g++ {
				wg.Go(func() {
					for i := 0; i < 200; i++ {
						ctx := context.Background()
						cancel := func() {}
						if withDeadline {
							ctx, cancel = context.WithTimeout(ctx, 50*time.Millisecond)
						}
						t0 := time.Now()
						err := b.Execute(ctx, func(ctx context.Context) error { time.Sleep(time.Millisecond); return nil })
						d := time.Since(t0) - time.Millisecond
						cancel()
						if int64(d) > worst.Load() {
							worst.Store(int64(d))
						}
						if err != nil {
							fails.Add(1)
							t.Logf("call %d failed: %v", i, err)
						}
						time.Sleep(5 * time.Millisecond)
					}
				})
			}
			wg.Wait()
			if time.Duration(worst.Load()) > 10*time.Millisecond {
				t.Errorf("a call waited %v for the store (bound 10ms)", time.Duration(worst.Load()))
			}
			if fails.Load() > 0 {
				t.Errorf("%d calls failed", fails.Load())
			}
		})
	}
}

// Store failing for a while (then answering, having forgotten its state),
// dependency failing 40% (below the 50% rate, never 2 in a row): no
// replica's own breaker may open.
func TestReview142StoreOutageFortyPercent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newR142Store()
		var opened atomic.Int64
		lis := resilience.ListenerFunc(func(e resilience.Event) {
			if e.Kind == resilience.EventStateChange && e.To == resilience.StateOpen {
				opened.Add(1)
			}
		})
		var reps []*breaker.Breaker
		for r := 0; r < 3; r++ {
			reps = append(reps, breaker.New("svc", breaker.Shared(st), breaker.FailureRate(0.5, 10), breaker.Window(2*time.Second, 10),
				breaker.FlushInterval(100*time.Millisecond), breaker.WithListener(lis)))
		}
		pattern := []bool{true, false, true, false, false}
		var refused atomic.Int64
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for r, b := range reps {
			wg.Go(func() {
				for i := r; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					fail := pattern[i%len(pattern)]
					err := b.Execute(context.Background(), func(ctx context.Context) error {
						if fail {
							return errR142Dead
						}
						return nil
					})
					if breaker.IsRejection(err) {
						refused.Add(1)
					}
					time.Sleep(time.Duration(1+r) * time.Millisecond)
				}
			})
		}
		for cycle := 0; cycle < 6; cycle++ {
			time.Sleep(time.Duration(700+cycle*130) * time.Millisecond)
			st.mu.Lock()
			st.failing = true
			st.mu.Unlock()
			time.Sleep(time.Duration(300+cycle*170) * time.Millisecond)
			st.mu.Lock()
			st.failing = false
			st.empty = true
			st.mu.Unlock()
		}
		time.Sleep(time.Second)
		close(stop)
		wg.Wait()
		for _, b := range reps {
			b.Close()
		}
		if opened.Load() > 0 || refused.Load() > 0 {
			t.Errorf("opened %d times, %d calls refused on a dependency failing 40%%", opened.Load(), refused.Load())
		}
	})
}

// Going alone right after a failure (a run of one), dependency failing 40%
// in the pattern S S F S F, FailureRate(0.5, 4): the run kept from before
// (a call the fleet judged) counts toward the rate, and the lone replica
// opens where a local breaker fed the same calls (all of them, or only
// those from the moment it went alone) never does.
func TestReview142AloneRunCountsTowardRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newR142Store()
		opts := []breaker.Option{breaker.FailureRate(0.5, 4), breaker.Window(10*time.Second, 10), breaker.OpenTimeout(time.Second)}
		b := breaker.New("svc", append(opts, breaker.Shared(st), breaker.FlushInterval(100*time.Millisecond))...)
		defer b.Close()
		whole := breaker.New("whole", opts...)
		fresh := breaker.New("fresh", opts...)
		pattern := []bool{false, false, true, false, true} // S S F S F: 40%
		call := func(br *breaker.Breaker, fail bool) error {
			return br.Execute(context.Background(), func(context.Context) error {
				if fail {
					return errR142Dead
				}
				return nil
			})
		}
		time.Sleep(50 * time.Millisecond)
		i := 0
		for ; i <= 19; i++ { // ends on a failure after a success
			if err := call(b, pattern[i%5]); breaker.IsRejection(err) {
				t.Fatalf("refused before the outage at %d", i)
			}
			_ = call(whole, pattern[i%5])
			time.Sleep(5 * time.Millisecond)
		}
		st.mu.Lock()
		st.failing = true
		st.mu.Unlock()
		time.Sleep(250 * time.Millisecond) // a flush fails: alone
		var refusedShared, refusedWhole, refusedFresh int
		for ; i <= 60; i++ {
			f := pattern[i%5]
			if breaker.IsRejection(call(b, f)) {
				refusedShared++
			}
			if breaker.IsRejection(call(whole, f)) {
				refusedWhole++
			}
			if breaker.IsRejection(call(fresh, f)) {
				refusedFresh++
			}
			time.Sleep(5 * time.Millisecond)
		}
		t.Logf("shared %d whole %d fresh %d", refusedShared, refusedWhole, refusedFresh)
		if refusedShared > refusedWhole || refusedShared > refusedFresh {
			t.Errorf("lone replica refused %d calls, a local breaker fed all calls %d, one fed the calls since %d",
				refusedShared, refusedWhole, refusedFresh)
		}
	})
}

func TestReview142AloneRunOfFourMin10(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newR142Store()
		opts := []breaker.Option{breaker.FailureRate(0.5, 10), breaker.Window(10*time.Second, 10), breaker.OpenTimeout(time.Second)}
		b := breaker.New("svc", append(opts, breaker.Shared(st), breaker.FlushInterval(100*time.Millisecond))...)
		defer b.Close()
		whole := breaker.New("whole", opts...)
		fresh := breaker.New("fresh", opts...)
		pattern := []bool{false, false, false, false, false, false, false, true, true, true, true, false, true, false, false} // 5 of 15 fail: 33%, runs of 4 < ConsecutiveFailures(5)
		call := func(br *breaker.Breaker, fail bool) error {
			return br.Execute(context.Background(), func(context.Context) error {
				if fail {
					return errR142Dead
				}
				return nil
			})
		}
		time.Sleep(50 * time.Millisecond)
		i := 0
		for ; i <= 10+15*20; i++ { // ends on the run of four
			if err := call(b, pattern[i%15]); breaker.IsRejection(err) {
				t.Fatalf("refused before the outage at %d", i)
			}
			_ = call(whole, pattern[i%15])
			time.Sleep(5 * time.Millisecond)
		}
		st.mu.Lock()
		st.failing = true
		st.mu.Unlock()
		time.Sleep(250 * time.Millisecond) // a flush fails: alone
		var refusedShared, refusedWhole, refusedFresh int
		for ; i <= 10+15*23; i++ {
			f := pattern[i%15]
			if breaker.IsRejection(call(b, f)) {
				refusedShared++
			}
			if breaker.IsRejection(call(whole, f)) {
				refusedWhole++
			}
			if breaker.IsRejection(call(fresh, f)) {
				refusedFresh++
			}
			time.Sleep(5 * time.Millisecond)
		}
		t.Logf("shared %d whole %d fresh %d", refusedShared, refusedWhole, refusedFresh)
		if refusedShared > refusedWhole || refusedShared > refusedFresh {
			t.Errorf("lone replica refused %d calls, a local breaker fed all calls %d, one fed the calls since %d",
				refusedShared, refusedWhole, refusedFresh)
		}
	})
}
