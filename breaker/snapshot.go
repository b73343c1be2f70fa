package breaker

import (
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/resiliencekit/resiliencekit/resilience"
)

// Snapshot is a breaker's live state at one moment, for dashboards and
// tests: what [Breaker.State], [Breaker.FleetState], [Breaker.Counts],
// [Breaker.NextProbe] and [Breaker.Mode] tell, read together, and the
// breaker's recent changes of state with their reasons.
type Snapshot struct {
	Name string
	// State is the state a caller sees, as [Breaker.State] returns it (a
	// forced mode's included).
	State resilience.State
	// Own is this replica's own breaker's state, without the fleet's or a
	// forced mode.
	Own resilience.State
	// Mode is the breaker's mode, who set it and when.
	Mode Forcing
	// Shared says the breaker shares its state with a fleet ([Shared]);
	// Fleet is the fleet's state as this replica goes by it, and
	// Generation the fleet's generation as last heard.
	Shared     bool
	Fleet      resilience.State
	Generation uint64
	// Counts are the outcomes counted in the current state (in the closed
	// state, within the window); under ForcedClosed, the calls made since
	// it was forced.
	Counts Counts
	// FailureRate is the share of failures among the calls that ended
	// that Counts holds, 0 if none ended.
	FailureRate float64
	// NextProbe is how long until the breaker, open, lets a probe through;
	// 0 unless open (and forced open: no probe is coming).
	NextProbe time.Duration
	// Transitions are the last changes of state, oldest first, at most
	// [MaxTransitions].
	Transitions []Transition
	// Policy is the breaker's configuration, as the options set it.
	Policy Policy
	// Closed says [Breaker.Close] was called on the shared breaker.
	Closed bool
}

// Policy is a breaker's configuration, for display.
type Policy struct {
	ConsecutiveFailures uint32
	// FailureRate and MinRequests are [FailureRate]'s arguments, 0 if off.
	FailureRate      float64
	MinRequests      uint32
	Window           time.Duration
	OpenTimeout      time.Duration
	HalfOpenRequests uint32
}

// Transition is one change of a breaker's state, with its reason, such as
// "5 consecutive failures" or "mode normal -> forced-open by alice".
type Transition struct {
	At       time.Time
	From, To resilience.State
	// Fleet says the fleet's state changed (a shared breaker's).
	Fleet  bool
	Reason string
}

// MaxTransitions is how many of its changes of state a breaker keeps for
// [Breaker.Snapshot].
const MaxTransitions = 16

// history keeps a breaker's last changes of state; they are rare, so a
// mutex suffices.
type history struct {
	mu   sync.Mutex
	ring [MaxTransitions]Transition
	n    int // changes ever
	// trip holds the counts that opened the breaker, written and read
	// under the core's lock (when it trips, then as it reports the change).
	trip Counts
}

func (h *history) add(t Transition) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ring[h.n%MaxTransitions] = t
	h.n++
}

func (h *history) list() []Transition {
	h.mu.Lock()
	defer h.mu.Unlock()
	k := min(h.n, MaxTransitions)
	out := make([]Transition, 0, k)
	for i := h.n - k; i < h.n; i++ {
		out = append(out, h.ring[i%MaxTransitions])
	}
	return out
}

// record notes a change of state with why it happened; for a local one it
// runs under the core's lock.
func (b *Breaker) record(from, to resilience.State, fleet bool) {
	t := Transition{At: time.Now(), From: from, To: to, Fleet: fleet}
	switch {
	case fleet:
		t.Reason = "the fleet's store says " + to.String()
	case to == resilience.StateOpen && from == resilience.StateHalfOpen:
		t.Reason = "a probe failed"
	case to == resilience.StateOpen:
		t.Reason = b.cfg.tripReason(b.history.trip)
	case to == resilience.StateHalfOpen:
		t.Reason = fmt.Sprintf("open for %v: probing", b.cfg.openTimeout)
	case to == resilience.StateClosed && from == resilience.StateHalfOpen:
		t.Reason = fmt.Sprintf("%d probe(s) succeeded", b.cfg.halfOpenRequests)
	default:
		t.Reason = from.String() + " -> " + to.String()
	}
	b.history.add(t)
}

// closed reports whether Close was called.
func (f *fleet) closed() bool {
	select {
	case <-f.stop:
		return true
	default:
		return false
	}
}

// sat32 is n, or the largest uint32 if n is larger.
func sat32(n uint64) uint32 {
	return uint32(min(n, math.MaxUint32))
}

// tripReason says which threshold the counts n met.
func (c *config) tripReason(n Counts) string {
	if c.consecutive > 0 && n.ConsecutiveFailures >= c.consecutive {
		return fmt.Sprintf("%d consecutive failures", n.ConsecutiveFailures)
	}
	done := uint64(n.TotalSuccesses) + uint64(n.TotalFailures)
	if c.rate > 0 && done > 0 {
		return fmt.Sprintf("failure rate %.0f%% of %d calls >= %.0f%%", 100*float64(n.TotalFailures)/float64(done), done, 100*c.rate)
	}
	return "opened"
}

// Snapshot returns the breaker's live state. It takes the breaker's lock
// briefly and does no I/O (see [Breaker.Fleet] for the store's totals); it
// is safe for concurrent use. A nil or zero Breaker's is closed and empty.
func (b *Breaker) Snapshot() Snapshot {
	if b == nil || b.cb == nil {
		return Snapshot{}
	}
	c := &b.cfg
	s := Snapshot{
		Name:   b.Name(),
		State:  b.State(),
		Own:    b.cb.State(),
		Mode:   b.Mode(),
		Counts: b.Counts(),
		Policy: Policy{
			ConsecutiveFailures: c.consecutive, FailureRate: c.rate, MinRequests: c.rateMin,
			Window: c.window, OpenTimeout: c.openTimeout, HalfOpenRequests: c.halfOpenRequests,
		},
		Transitions: b.history.list(),
	}
	ok, failed := uint64(s.Counts.TotalSuccesses), uint64(s.Counts.TotalFailures)
	if f := b.force.Load(); f != nil && f.Mode == ForcedClosed {
		// Outcomes first, so that every call they count is among the
		// requests read after; the calls still running are in requests alone.
		ok, failed = f.successes.Load(), f.failures.Load()
		excl, req := f.exclusions.Load(), f.requests.Load()
		s.Counts = Counts{Requests: sat32(req), TotalFailures: sat32(failed), TotalExclusions: sat32(excl), TotalSuccesses: sat32(ok)}
	}
	if done := ok + failed; done > 0 {
		s.FailureRate = float64(failed) / float64(done)
	}
	if b.fleet != nil {
		s.Shared = true
		s.Closed = b.fleet.closed()
		s.Fleet = b.fleet.view()
		s.Generation = b.fleet.gen.Load()
	}
	if s.State == resilience.StateOpen && s.Mode.Mode != ForcedOpen {
		if next := b.NextProbe(); !next.IsZero() {
			s.NextProbe = max(time.Until(next), 0)
		}
	}
	s.Transitions = slices.Clip(s.Transitions)
	return s
}
