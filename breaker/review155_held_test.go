package breaker_test

// review155: the vouching replica's held counts against a scripted fleet
// store (fake time), which follows the Redis script's rules where they
// matter here: counts only in the current closed generation, a batch
// applied once, a probe's success closing the half-open generation under
// a new one, the change published (before or after the flush's answer).

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/resilience"
)

type model155 struct {
	mu         sync.Mutex
	open       bool
	opened     time.Time
	openT      time.Duration
	gen, prev  uint64
	down       bool
	loseNext   int  // answers lost, the Sync applied
	watchFirst bool // publish a change before the flush's answer
	prevSays   func(real uint64) uint64
	seen       map[string]bool
	reqs       map[uint64]uint64
	subs       []func(breaker.Fleet)
	pending    []breaker.Fleet // published after the answer
	log        func(string, ...any)
}

func (m *model155) fleet() breaker.Fleet {
	st := resilience.StateClosed
	if m.open {
		st = resilience.StateOpen
		if !time.Now().Before(m.opened.Add(m.openT)) {
			st = resilience.StateHalfOpen
		}
	}
	p := m.prev
	if m.prevSays != nil {
		p = m.prevSays(p)
	}
	return breaker.Fleet{State: st, Generation: m.gen, Previous: p}
}

func (m *model155) Sync(ctx context.Context, name string, s breaker.Sync) (breaker.Fleet, error) {
	m.mu.Lock()
	if m.down {
		m.mu.Unlock()
		return breaker.Fleet{}, errors.New("store down")
	}
	fresh := s.Batch == "" || !m.seen[s.Batch]
	if m.log != nil {
		m.log("%v sync batch=%q gen=%d req=%d pok=%d state=%v (store gen %d open %v) fresh=%v", time.Now().Format("05.000"), s.Batch, s.Generation, s.Requests, s.ProbeSuccesses, s.State, m.gen, m.open, fresh)
	}
	if s.Batch != "" {
		m.seen[s.Batch] = true
	}
	var changes []breaker.Fleet
	cur := m.fleet()
	if fresh && !s.GenerationUnknown && s.Generation == m.gen {
		gen0 := m.gen
		if cur.State == resilience.StateHalfOpen && s.ProbeFailures > 0 {
			m.prev, m.gen, m.opened = m.gen, m.gen+1, time.Now()
			changes = append(changes, m.fleet())
		} else if cur.State == resilience.StateHalfOpen && s.ProbeSuccesses > 0 {
			m.prev, m.gen, m.open = m.gen, m.gen+1, false
			changes = append(changes, m.fleet())
		}
		if !m.open && m.gen == gen0 {
			m.reqs[m.gen] += s.Requests
		}
	}
	ans := m.fleet()
	lose := m.loseNext > 0
	if lose {
		m.loseNext--
	}
	subs := append([]func(breaker.Fleet){}, m.subs...)
	if !m.watchFirst {
		m.pending = append(m.pending, changes...)
		changes = nil
	}
	m.mu.Unlock()
	for _, c := range changes {
		for _, f := range subs {
			f(c)
		}
	}
	if lose {
		return breaker.Fleet{}, errors.New("answer lost")
	}
	return ans, nil
}

// publishLate delivers the changes held back until after the answer.
func (m *model155) publishLate() {
	m.mu.Lock()
	p := m.pending
	m.pending = nil
	subs := append([]func(breaker.Fleet){}, m.subs...)
	m.mu.Unlock()
	for _, c := range p {
		for _, f := range subs {
			f(c)
		}
	}
}

func (m *model155) Watch(ctx context.Context, name string, changed func(breaker.Fleet)) error {
	m.mu.Lock()
	m.subs = append(m.subs, changed)
	m.mu.Unlock()
	<-ctx.Done()
	m.mu.Lock()
	m.subs = nil
	m.mu.Unlock()
	return ctx.Err()
}

type case155 struct {
	watchFirst bool
	lose       int // answers lost after the vouch
	prevSays   func(uint64) uint64
	want       uint64 // held calls counted in the closing
}

// run155: V vouches in generation 10 (open, then half-open, while its
// store was down and its own calls succeeded), probes with one call, then
// makes 5 more calls (held): the closing (11) must count them want times.
func run155(t *testing.T, cs case155) {
	synctest.Test(t, func(t *testing.T) {
		m := &model155{open: true, opened: time.Now(), openT: time.Second, gen: 10, prev: 9,
			seen: map[string]bool{}, reqs: map[uint64]uint64{}, watchFirst: cs.watchFirst, prevSays: cs.prevSays, log: t.Logf}
		v := breaker.New("v", breaker.Shared(m), breaker.FailureRate(0.5, 4), breaker.Window(10*time.Second, 10),
			breaker.OpenTimeout(time.Second), breaker.FlushInterval(100*time.Millisecond), breaker.HalfOpenRequests(1))
		defer v.Close()
		ok := func(context.Context) error { return nil }
		time.Sleep(50 * time.Millisecond)
		if v.FleetState() != resilience.StateOpen {
			t.Fatalf("fleet %v, want open", v.FleetState())
		}
		m.mu.Lock()
		m.down = true
		m.mu.Unlock()
		time.Sleep(1100 * time.Millisecond) // unconfirmed: alone
		for i := range 3 {
			if err := v.Execute(t.Context(), ok); err != nil {
				t.Fatalf("alone call %d: %v", i, err)
			}
		}
		m.mu.Lock()
		m.down = false
		m.mu.Unlock()
		time.Sleep(287 * time.Millisecond) // V rejoins: half-open 10, vouches; off the flush ticks
		if v.FleetState() != resilience.StateClosed {
			t.Fatalf("V does not vouch (fleet %v)", v.FleetState())
		}
		m.mu.Lock()
		m.loseNext = cs.lose
		m.mu.Unlock()
		t.Logf("%v calls", time.Now().Format("05.000"))
		for i := range 6 { // the probe, then 5 held
			if err := v.Execute(t.Context(), ok); err != nil {
				t.Errorf("healthy call %d refused: %v", i, err)
			}
		}
		for range 20 {
			time.Sleep(100 * time.Millisecond)
			m.publishLate()
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.gen != 11 || m.open {
			t.Fatalf("fleet gen %d open %v, want closed 11", m.gen, m.open)
		}
		if got := m.reqs[11]; got != cs.want {
			t.Errorf("closing 11 counts %d requests, want %d (the 5 held)", got, cs.want)
		}
		for g, n := range m.reqs {
			if g != 11 && n != 0 {
				t.Errorf("generation %d counts %d", g, n)
			}
		}
	})
}

func TestReview155HeldCountedOnceInTheirClosing(t *testing.T) {
	for _, wf := range []bool{false, true} {
		for _, lose := range []int{0, 1, 2, 3} {
			t.Run(fmt.Sprintf("watchFirst=%v/lost=%d", wf, lose), func(t *testing.T) {
				run155(t, case155{watchFirst: wf, lose: lose, want: 5})
			})
		}
	}
}

// A store that does not say Previous (0), or says another generation:
// the held calls are dropped, never counted in the closing.
func TestReview155HeldDroppedWithoutPrevious(t *testing.T) {
	for name, says := range map[string]func(uint64) uint64{
		"none":  func(uint64) uint64 { return 0 },
		"other": func(p uint64) uint64 { return p + 100 },
	} {
		for _, wf := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/watchFirst=%v", name, wf), func(t *testing.T) {
				run155(t, case155{watchFirst: wf, prevSays: says, want: 0})
			})
		}
	}
}
