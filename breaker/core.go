package breaker

import (
	"math"
	"sync"
	"time"

	"github.com/resiliencekit/resiliencekit/internal/monotime"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// core is a breaker's state machine, under one mutex: the state, its
// generation (bumped on every change, so an outcome counts only in the
// state its call was admitted in) and the counts of the closed state's
// rolling window.
//
// A call reads the monotonic clock once, as it is admitted: for the end of
// the open state and the window's current bucket. Its outcome counts in
// the bucket it was admitted in. A success while no run of failures is
// counted, the common case, reads no clock as it ends: if its bucket left
// the window since the last call was admitted, it still counts until the
// next admission drops that bucket, and changes no decision meanwhile (it
// breaks no run of failures, and only a failure asks whether to trip). A
// failure, or a success that would break a run of failures, reads the
// clock again to judge the window as it is then, as gobreaker does for
// every outcome; so does any outcome with a window of one bucket, which
// starts anew at the first admission or outcome after it passed, and any
// change of state. It keeps gobreaker's model (TestCoreAgreesWithGobreaker
// holds it to gobreaker v2's, with gobreakerTiming) but in two things,
// both about a dependency coming back:
//
//   - Cadence. A probe that fails opens the breaker until the next moment
//     of its cadence: an open timeout after the last moment it turned
//     half-open, plus a drift of up to an eighth of it, not an open
//     timeout after the failure. The moments it probes then do not move
//     with the probes' latency or the calls' arrival, so a run probes at
//     the same moments as the next; the drift, fractions of the golden
//     ratio's multiples, follows no period, so the probes do not lock onto
//     a dependency that is up on a regular beat, between them. A probe
//     slow to fail, one that would leave less than half an open timeout
//     to the next moment, opens it for an open timeout from the failure,
//     and the cadence starts there anew.
//   - Probation. For probationTimeouts open timeouts after it closes on its
//     probes after an outage (a probe failed since it opened), it takes
//     probationFactor times the failures in a row that open it otherwise
//     to open it again: a dependency back in part, as one coming back from
//     an outage usually is, fails some calls while it catches up, and a
//     breaker that opens on the first few refuses the calls it would have
//     served. A blip, over before the first probe, earns no probation: the
//     dependency is back whole, and a breaker slower to open again there
//     stays open longer into the next blip's healthy time. A failure rate
//     trips it as usual.
type core struct {
	maxRequests uint32        // probes let through when half-open, at least 1
	timeout     time.Duration // how long the open state lasts
	period      time.Duration // a bucket's span; 0: no window
	readyToTrip func(n Counts, probation bool) bool
	changed     func(from, to resilience.State, since time.Duration) // under mu; since: how long ago the new state began, by its clock
	// gobreakerTiming turns cadence and probation off, for the tests that
	// hold the rest of the model to gobreaker's.
	gobreakerTiming bool

	mu        sync.Mutex
	state     resilience.State
	gen       uint64
	start     monotime.Reading // of the state; buckets are counted from it, and the open timeout
	due       monotime.Reading // when the open state ends, or ended last: the cadence's last moment
	cycle     uint64           // open states since it opened from closed, or the cadence started anew
	closed    monotime.Reading // when it closed from half-open, if probation: the probation counts from it
	probation bool
	outage    bool     // a probe failed since it opened from closed: the dependency was down for longer than a blip
	age       uint64   // the current bucket, counted from start
	win       Counts   // the sum of buckets
	buckets   []Counts // indexed by age modulo their number
}

// The probation after the breaker closes on its probes (see core): it
// lasts probationTimeouts open timeouts, and takes probationFactor times
// the failures in a row to open the breaker again. Across the slow
// recovery of docs/storm.md, twice the run opened it again at 3 of 16
// moments in virtual time, three times at none; in real time over gRPC,
// three times opened it again in 2 of 6 runs, five times in none of 6.
const (
	probationTimeouts = 10
	probationFactor   = 5
)

// verdict is what admit says of a call.
type verdict uint8

const (
	admitted verdict = iota
	refusedOpen
	refusedBusy
)

// outcome is how a finished call counts.
type outcome uint8

const (
	counted outcome = iota // a success
	failed
	excluded
)

// newCore returns a closed core; window 0 keeps counts until the state
// changes, else they are kept over window in n buckets.
func newCore(maxRequests uint32, timeout, window time.Duration, n int, readyToTrip func(Counts, bool) bool, changed func(from, to resilience.State, since time.Duration)) *core {
	c := &core{maxRequests: max(maxRequests, 1), timeout: timeout, readyToTrip: readyToTrip, changed: changed}
	n = max(n, 1)
	if window > 0 && window/time.Duration(n) > 0 {
		c.period = window / time.Duration(n)
	} else {
		n = 1
	}
	c.buckets = make([]Counts, n)
	c.start = monotime.Now()
	return c
}

// admit decides whether a call may go, and returns the generation and
// bucket its outcome counts in.
func (c *core) admit() (v verdict, gen, age uint64) {
	now := monotime.Now()
	c.mu.Lock()
	defer c.mu.Unlock() // a state change is reported under it, and may panic
	st := c.current(now)
	switch {
	case st == resilience.StateOpen:
		v = refusedOpen
	case st == resilience.StateHalfOpen && c.win.Requests-min(c.win.TotalExclusions, c.win.Requests) >= c.maxRequests:
		v = refusedBusy
	default:
		c.win.Requests++
		c.buckets[c.age%uint64(len(c.buckets))].Requests++
	}
	return v, c.gen, c.age
}

// done counts the outcome of a call that admit let go.
func (c *core) done(gen, age uint64, o outcome) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state == resilience.StateClosed && c.period > 0 && (o == failed || c.win.ConsecutiveFailures > 0 || len(c.buckets) == 1) {
		// An outcome that may trip the breaker, or break a run of
		// failures, is judged on the window as it is now; with one
		// bucket, any outcome, which may start the next window.
		c.current(monotime.Now())
	}
	if gen != c.gen {
		return // admitted in a state, or one bucket's window, that has gone
	}
	if age+uint64(len(c.buckets)) <= c.age {
		// Its bucket has left the window: it does not count, but a
		// failure asks whether the window as it is now trips the breaker.
		if now := monotime.Now(); o == failed && c.readyToTrip(c.win, c.onProbation(now)) {
			c.set(resilience.StateOpen, now)
		}
		return
	}
	b := &c.buckets[age%uint64(len(c.buckets))]
	switch o {
	case excluded:
		c.win.TotalExclusions++
		b.TotalExclusions++
	case counted:
		c.win.TotalSuccesses++
		b.TotalSuccesses++
		c.win.ConsecutiveSuccesses++
		c.win.ConsecutiveFailures = 0
		if c.state == resilience.StateHalfOpen && c.win.ConsecutiveSuccesses >= c.maxRequests {
			c.set(resilience.StateClosed, monotime.Now())
		}
	case failed:
		c.win.TotalFailures++
		b.TotalFailures++
		c.win.ConsecutiveFailures++
		c.win.ConsecutiveSuccesses = 0
		if c.state == resilience.StateHalfOpen {
			c.set(resilience.StateOpen, monotime.Now())
		} else if now := monotime.Now(); c.state == resilience.StateClosed && c.readyToTrip(c.win, c.onProbation(now)) {
			c.set(resilience.StateOpen, now)
		}
	}
}

// State returns the state at now, moving from open to half-open once the
// open timeout has passed.
func (c *core) State() resilience.State {
	now := monotime.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.current(now)
}

// Counts returns the counts of the current state (closed: of the window).
func (c *core) Counts() Counts {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.win
}

// current brings the state up to now, under mu: an open state whose timeout
// has passed turns half-open; a closed one drops the buckets older than the
// window (with one bucket, a window that has passed starts anew). now may
// be a little behind start (read before the lock).
func (c *core) current(now monotime.Reading) resilience.State {
	elapsed := time.Duration(now - c.start)
	switch c.state {
	case resilience.StateOpen:
		if elapsed > c.timeout {
			c.set(resilience.StateHalfOpen, now)
		}
	case resilience.StateClosed:
		switch {
		case c.period == 0 || elapsed < 0:
		case len(c.buckets) == 1:
			if elapsed > c.period {
				c.renew(now) // one bucket: a new window from now, as gobreaker's Interval
			}
		default:
			c.advance(uint64(elapsed / c.period))
		}
	}
	return c.state
}

// advance moves the window to bucket age, dropping what falls out of it.
// A run of successes or failures keeps only the part still in the window:
// the run is the latest outcomes, so if it began in a bucket that fell out,
// every outcome of its kind still in the window belongs to it.
func (c *core) advance(age uint64) {
	if age <= c.age {
		return
	}
	n := uint64(len(c.buckets))
	if age-c.age >= n {
		clear(c.buckets)
		c.win = Counts{}
	} else {
		for a := c.age + 1; a <= age; a++ {
			b := &c.buckets[a%n]
			c.win.Requests -= b.Requests
			c.win.TotalSuccesses -= b.TotalSuccesses
			c.win.TotalFailures -= b.TotalFailures
			c.win.TotalExclusions -= b.TotalExclusions
			*b = Counts{}
		}
		c.win.ConsecutiveSuccesses = min(c.win.ConsecutiveSuccesses, c.win.TotalSuccesses)
		c.win.ConsecutiveFailures = min(c.win.ConsecutiveFailures, c.win.TotalFailures)
	}
	c.age = age
}

// onProbation reports whether, at now, the breaker closed on its probes
// less than probationTimeouts open timeouts ago; under mu.
func (c *core) onProbation(now monotime.Reading) bool {
	return c.probation && time.Duration(now-c.closed)/probationTimeouts < c.timeout // not 10*timeout, which may overflow
}

// set moves to state to as of now, under mu, in a new generation with
// empty counts, and reports the change. An open state that a failed probe
// starts counts its timeout from the last moment of the cadence (see core).
func (c *core) set(to resilience.State, now monotime.Reading) {
	from := c.state
	if from == to {
		return
	}
	c.state = to
	c.renew(now)
	switch {
	case c.gobreakerTiming:
	case to == resilience.StateOpen && from == resilience.StateHalfOpen:
		c.outage = true
		c.cycle++
		c.due = after(c.due, c.timeout+drift(c.cycle, c.timeout))
		if c.due < after(now, c.timeout/2) {
			c.due, c.cycle = after(now, c.timeout), 0
		}
		c.start = c.due - monotime.Reading(c.timeout)
	case to == resilience.StateOpen:
		c.due, c.cycle = after(now, c.timeout), 0
		c.probation, c.outage = false, false
	case to == resilience.StateClosed && from == resilience.StateHalfOpen:
		c.closed, c.probation = now, c.outage
	}
	c.changed(from, to, time.Duration(now-c.start))
}

// drift is how much later than an open timeout after the last the n-th
// moment of a cadence comes: the fractional part of n times the golden
// ratio, an eighth of d at most.
func drift(n uint64, d time.Duration) time.Duration {
	_, f := math.Modf(float64(n) * math.Phi)
	return time.Duration(f * float64(d/8))
}

// after returns r plus d, or the end of time if that is past it.
func after(r monotime.Reading, d time.Duration) monotime.Reading {
	if t := r + monotime.Reading(d); t >= r {
		return t
	}
	return math.MaxInt64
}

// renew starts a new generation as of now, under mu, with empty counts:
// the outcomes of calls admitted before it do not count.
func (c *core) renew(now monotime.Reading) {
	c.gen++
	c.start = now
	c.age = 0
	c.win = Counts{}
	clear(c.buckets)
}
