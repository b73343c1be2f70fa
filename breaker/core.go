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
// the bucket it was admitted in, or, if that bucket has left the window
// (the call outlasted the window, or with one bucket the window started
// anew while it ran), with a request in the current bucket: as of its
// end. gobreaker drops such an outcome; so a dependency whose failures
// take longer than the window (a hang, calls whose deadlines are longer
// than the window) never opened the breaker (review118). A success while
// no run of failures is counted, the common case, reads no clock as it
// ends: if its bucket left the window since the last call was admitted,
// it still counts in that bucket until the next admission drops it, and
// changes no decision meanwhile (it breaks no run of failures, and only a
// failure asks whether to trip). A failure, or a success that would break
// a run of failures, reads the clock again to judge the window as it is
// then, as gobreaker does for every outcome; so does any outcome with a
// window of one bucket, which starts anew at the first admission or
// outcome after it passed, and any change of state. Otherwise it keeps
// gobreaker's model (TestCoreAgreesWithGobreaker holds it to gobreaker
// v2's on calls shorter than a bucket).
type core struct {
	maxRequests uint32        // probes let through when half-open, at least 1
	timeout     time.Duration // how long the open state lasts
	period      time.Duration // a bucket's span; 0: no window
	readyToTrip func(Counts) bool
	changed     func(from, to resilience.State) // under mu

	mu      sync.Mutex
	state   resilience.State
	gen     uint64
	probeAt monotime.Reading // half-open: when the last probe was let through
	overdue uint32           // half-open: probes let through past the limit, overdue (see overdueProbe)
	start   monotime.Reading // of the state; buckets are counted from it
	age     uint64           // the current bucket, counted from start (one bucket: the windows started since the state's)
	win     Counts           // the sum of buckets
	buckets []Counts         // indexed by age modulo their number
	kept    []uint32         // per bucket, the outcomes of the run forget kept, which the failure rate leaves out; nil if none
	keptN   uint32           // their sum
	keptBad bool             // the run kept is of failures

	// What tells a call that its caller's deadline ended from one the
	// dependency failed (see cutShort): slow keeps, per slowSpan of
	// admission time, the slowest answer timed (the first timeFirst of
	// each span, then one in timeOneIn at random). skip answers admitted
	// before spanEnd go untimed before the next is timed; rnd draws skip.
	// Spans are counted from origin, the core's making, and rnd starts
	// from a constant: in a testing/synctest bubble, readings depend on
	// when the process started, and the virtual-time figures must not
	// (review166).
	skip    uint32
	origin  monotime.Reading
	spanEnd monotime.Reading
	slow    [slowSpans]slowest
	rnd     uint64
	latest  monotime.Reading // the latest admission's reading: an untimed answer took at least latest-at
}

// slowest is the slowest answer timed among the calls admitted in the
// span of index span, of timed answers.
type slowest struct {
	span  int64
	took  time.Duration
	timed int
}

// A breaker times, among the calls the dependency answered, the first
// timeFirst of every slowSpan of admission time and then one in timeOneIn
// at random, so that a success seldom reads the clock as it ends; the
// others are taken to have lasted until the latest admission, which reads
// the clock anyway. It keeps the slowest of each span for slowSpans spans
// (so every answer of the last minute), and takes no less than minAnswer
// for the time an answer may take.
const (
	slowSpan  = 10 * time.Second
	slowSpans = 8
	timeFirst = 16
	timeOneIn = 16
	minAnswer = 100 * time.Millisecond
)

// admission is what admit tells of a call it lets go: the generation and
// bucket its outcome counts in, and when it was admitted.
type admission struct {
	gen, age uint64
	at       monotime.Reading
}

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
func newCore(maxRequests uint32, timeout, window time.Duration, n int, readyToTrip func(Counts) bool, changed func(from, to resilience.State)) *core {
	c := &core{maxRequests: max(maxRequests, 1), timeout: timeout, readyToTrip: readyToTrip, changed: changed}
	n = max(n, 1)
	if window > 0 && window/time.Duration(n) > 0 {
		c.period = window / time.Duration(n)
	} else {
		n = 1
	}
	c.buckets = make([]Counts, n)
	c.start = monotime.Now()
	c.latest = c.start
	c.origin, c.spanEnd = c.start, c.start
	c.rnd = 0x9e3779b97f4a7c15 // any odd seed: the draws only spread the timed answers
	for i := range c.slow {
		c.slow[i].span = math.MinInt64 // none timed
	}
	return c
}

// admit decides whether a call may go, and what its outcome needs.
func (c *core) admit() (v verdict, a admission) {
	now := monotime.Now()
	c.mu.Lock()
	defer c.mu.Unlock() // a state change is reported under it, and may panic
	st := c.current(now)
	switch {
	case st == resilience.StateOpen:
		v = refusedOpen
	case st == resilience.StateHalfOpen && c.busy():
		if time.Duration(now-c.probeAt) <= c.overdueAfter() {
			v = refusedBusy
			break
		}
		// A probe that has not answered for overdueProbe open timeouts (a
		// connection in a black hole, a caller without a deadline) would
		// hold its slot, and the breaker, forever: another goes, and
		// another each as long after. A late answer of the first still
		// counts.
		c.overdue++
		fallthrough
	default:
		if c.win.Requests >= halveAt && st == resilience.StateClosed {
			c.halve()
		}
		c.win.Requests++
		c.buckets[c.age%uint64(len(c.buckets))].Requests++
		if st == resilience.StateHalfOpen {
			c.probeAt = now
		}
	}
	if now < c.latest-monotime.Reading(slowSpan) {
		c.rebase(now)
	}
	c.latest = max(c.latest, now)
	return v, admission{gen: c.gen, age: c.age, at: now}
}

// overdueProbe is how many open timeouts a half-open breaker waits for
// its probes to answer before it lets another go: long enough that a
// dependency slower than the open timeout still closes it on its first
// probe's answer, and a probe that never answers holds it for a bounded
// time (1 s with the default open timeout).
const overdueProbe = 10

// overdueAfter is how long a probe may be out before another goes.
func (c *core) overdueAfter() time.Duration {
	if c.timeout > math.MaxInt64/overdueProbe {
		return math.MaxInt64
	}
	return overdueProbe * c.timeout
}

// busy reports whether a half-open breaker's probes are all out; c.mu is
// held.
func (c *core) busy() bool {
	return c.win.Requests-min(c.win.TotalExclusions+c.overdue, c.win.Requests) >= c.maxRequests
}

// done counts the outcome of a call that admit let go as a.
func (c *core) done(a admission, o outcome) {
	gen, age := a.gen, a.age
	c.mu.Lock()
	defer c.mu.Unlock()
	if o == counted {
		c.answered(a.at)
	}
	if c.state == resilience.StateClosed && c.period > 0 && (o == failed || c.win.ConsecutiveFailures > 0 || len(c.buckets) == 1) {
		// An outcome that may trip the breaker, or break a run of
		// failures, is judged on the window as it is now; with one
		// bucket, any outcome, which may start the next window.
		c.current(monotime.Now())
	}
	if gen != c.gen {
		return // admitted in a state that has gone
	}
	n := uint64(len(c.buckets))
	b := &c.buckets[age%n]
	if age+n <= c.age { // its bucket has left the window: it counts as of now
		if o == excluded {
			return
		}
		b = &c.buckets[c.age%n]
		b.Requests++
		c.win.Requests++
	}
	switch o {
	case excluded:
		c.win.TotalExclusions++
		b.TotalExclusions++
		if c.overdue > 0 {
			// Most likely the overdue probe, whose slot another already has:
			// it does not free one again. If it was the other, the overdue
			// one counts as out again, until it is overdue anew.
			c.overdue--
		}
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
		if c.state == resilience.StateHalfOpen || (c.state == resilience.StateClosed && c.readyToTrip(c.judged())) {
			c.set(resilience.StateOpen, monotime.Now())
		}
	}
}

// answer counts an answer of the dependency, outside the state machine,
// to a call marked at at.
func (c *core) answer(at monotime.Reading) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.answered(at)
}

// answered counts an answer of the dependency to a call admitted at at,
// and times it if it is among the first timeFirst of its span, or drawn;
// c.mu is held.
func (c *core) answered(at monotime.Reading) {
	if c.skip > 0 && at < c.spanEnd {
		c.skip-- // not timed: lasted until the latest admission at least
		span := c.spanOf(at)
		if sl := &c.slow[slot(span)]; sl.span == span && c.latest-at > monotime.Reading(sl.took) {
			sl.took = time.Duration(c.latest - at)
		}
		return
	}
	c.timeAnswer(at)
}

// rebase starts the spans again from now, under mu, when an admission
// finds the clock a span or more behind the latest: time went back (a
// core made outside a testing/synctest bubble and used in one, or used in
// two in turn), and the answers timed before say nothing of the
// dependency then (review167). A call admitted long ago, answered late,
// does not: that is no clock going back (review168).
func (c *core) rebase(now monotime.Reading) {
	c.origin, c.spanEnd, c.skip, c.latest = now, now, 0, now
	for i := range c.slow {
		c.slow[i] = slowest{span: math.MinInt64}
	}
}

// spanOf returns the index of the span of slowSpan that at falls in,
// counted from origin (a reading a little before it is in span -1).
func (c *core) spanOf(at monotime.Reading) int64 {
	d := int64(at - c.origin)
	span := d / int64(slowSpan)
	if d < 0 && d%int64(slowSpan) != 0 {
		span--
	}
	return span
}

// slot returns the index in core.slow of span.
func slot(span int64) int64 {
	return (span%slowSpans + slowSpans) % slowSpans // a span may be negative (a reading a little before origin)
}

// timeAnswer times an answer to a call admitted at at, and draws how
// many go untimed next; c.mu is held.
func (c *core) timeAnswer(at monotime.Reading) {
	span := c.spanOf(at)
	sl := &c.slow[slot(span)]
	if sl.span < span {
		*sl = slowest{span: span}
	}
	if sl.span == span {
		sl.took = max(sl.took, monotime.Since(at), 1)
		sl.timed++
	}
	if end := c.origin + monotime.Reading((span+1)*int64(slowSpan)); end > c.spanEnd {
		c.spanEnd = end
	}
	if at < c.spanEnd-monotime.Reading(slowSpan) {
		return // of a span before the current one: the current one's count of skips is not its own
	}
	c.skip = 0
	if sl.timed >= timeFirst {
		c.rnd ^= c.rnd << 13 // xorshift64
		c.rnd ^= c.rnd >> 7
		c.rnd ^= c.rnd << 17
		c.skip = uint32(c.rnd % (2*timeOneIn - 1)) // 0 to 30: one in 16 on average
	}
}

// cutShort reports whether a call admitted at at, which its caller's
// deadline ended, had less time than the dependency's answers may take
// (had: its budget, from its admission to its deadline): the slowest
// answer of the last slowSpans spans, and minAnswer at least.
func (c *core) cutShort(at monotime.Reading, had time.Duration) bool {
	if had < minAnswer {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	span := c.spanOf(at)
	for _, sl := range c.slow {
		if sl.span > span-slowSpans && had < sl.took {
			return true
		}
	}
	return false
}

// State returns the state at now, moving from open to half-open once the
// open timeout has passed.
func (c *core) State() resilience.State {
	now := monotime.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.current(now)
}

// Counts returns the counts of the current state (closed: of the window
// as it is now).
func (c *core) Counts() Counts {
	now := monotime.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.current(now)
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
				// One bucket: a new window from now, as gobreaker's
				// Interval; the calls still out count in it as they end.
				c.start = now
				c.age++
				c.empty()
			}
		default:
			c.advance(uint64(elapsed / c.period))
		}
	}
	return c.state
}

// forget starts a closed breaker's window afresh, but for the run of
// failures or successes that ends it, which stays in the buckets it was
// counted in and leaves the window with them; the state and its
// generation stay. The run counts in ConsecutiveFailures and in Counts,
// not in the failure rate (judged): those calls were judged by the fleet
// (review142: a run of one failure kept made 2 in 4 of a dependency
// failing 40%). A shared breaker's replica that starts deciding alone
// forgets what it counted while the fleet decided: a local breaker fed
// the same calls would have opened on them then and started afresh as it
// closed.
//
// alone, under the core's lock, changes what readyToTrip goes by (the
// replica goes alone) and reports whether to forget: no outcome is judged
// by the new rule on the window before it is forgotten (review141).
func (c *core) forget(alone func() bool) {
	now := monotime.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if !alone() || c.current(now) != resilience.StateClosed || c.period == 0 {
		return
	}
	failing, ok := c.win.ConsecutiveFailures, c.win.ConsecutiveSuccesses
	left := failing + ok // one of them is 0
	c.win = Counts{ConsecutiveFailures: failing, ConsecutiveSuccesses: ok}
	n := uint64(len(c.buckets))
	if c.kept == nil {
		c.kept = make([]uint32, n)
	}
	c.keptN, c.keptBad = 0, failing > 0
	for i := range n { // newest first
		at := (c.age + n - i) % n
		b := &c.buckets[at]
		k := min(left, b.TotalSuccesses)
		if failing > 0 {
			k = min(left, b.TotalFailures)
		}
		if i > c.age { // before the state began: no bucket
			k = 0
		}
		left -= k
		c.kept[at] = k
		c.keptN += k
		out := b.Requests - min(b.Requests, b.TotalSuccesses+b.TotalFailures+b.TotalExclusions) // calls in flight, still admitted
		*b = Counts{Requests: k + out}
		if failing > 0 {
			b.TotalFailures = k
		} else {
			b.TotalSuccesses = k
		}
		c.win.Requests += b.Requests
		c.win.TotalFailures += b.TotalFailures
		c.win.TotalSuccesses += b.TotalSuccesses
	}
	c.win.ConsecutiveFailures = failing // whole, as halve keeps it; advance drops what leaves the window
	c.win.ConsecutiveSuccesses = min(ok, c.win.TotalSuccesses)
}

// halveAt is how many calls a closed breaker's window holds before it
// halves its counts: they are 32-bit, as gobreaker's, and a window that
// counts without end (Window(0)) or over a long span would otherwise wrap
// them after 2^32 calls (days at ten thousand a second), and a failure rate
// taken over wrapped counts trips on a few failures.
const halveAt = 1 << 31

// halve halves the counts of every bucket of the window, keeping their
// shares; c.mu is held. The run of failures is the latest outcomes, which
// halving the totals does not change; the run of successes is kept within
// their total.
func (c *core) halve() {
	ok, failing := c.win.ConsecutiveSuccesses, c.win.ConsecutiveFailures
	c.win = Counts{}
	c.keptN = 0
	for i := range c.kept { // the run forget kept, halved with its buckets
		c.kept[i] /= 2
		c.keptN += c.kept[i]
	}
	for i := range c.buckets {
		b := &c.buckets[i]
		b.Requests /= 2
		b.TotalSuccesses /= 2
		b.TotalFailures /= 2
		b.TotalExclusions /= 2
		c.win.Requests += b.Requests
		c.win.TotalSuccesses += b.TotalSuccesses
		c.win.TotalFailures += b.TotalFailures
		c.win.TotalExclusions += b.TotalExclusions
	}
	c.win.ConsecutiveSuccesses = min(ok, c.win.TotalSuccesses)
	c.win.ConsecutiveFailures = failing
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
		c.empty()
	} else {
		for a := c.age + 1; a <= age; a++ {
			if c.kept != nil {
				c.keptN -= c.kept[a%n]
				c.kept[a%n] = 0
			}
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

// set moves to state to as of now, under mu, in a new generation with
// empty counts, and reports the change.
func (c *core) set(to resilience.State, now monotime.Reading) {
	from := c.state
	if from == to {
		return
	}
	c.state = to
	c.renew(now)
	c.changed(from, to)
}

// renew starts a new generation as of now, under mu, with empty counts:
// the outcomes of calls admitted before it do not count.
func (c *core) renew(now monotime.Reading) {
	c.gen++
	c.start = now
	c.overdue = 0
	c.age = 0
	c.empty()
}

// empty empties the window: its buckets, their sum, and the run forget
// kept; c.mu is held.
func (c *core) empty() {
	c.win = Counts{}
	clear(c.buckets)
	clear(c.kept)
	c.keptN = 0
}

// judged returns the counts the breaker judges a closed window by: the
// run forget kept counts in the run of failures, not in the failure
// rate, which goes by the calls counted since (see forget).
func (c *core) judged() Counts {
	n := c.win
	if c.keptN == 0 {
		return n
	}
	if c.keptBad {
		n.TotalFailures -= min(c.keptN, n.TotalFailures)
	} else {
		n.TotalSuccesses -= min(c.keptN, n.TotalSuccesses)
	}
	return n
}
