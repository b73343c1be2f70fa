// Package limit caps how many attempts are in flight to a dependency at
// once: a fixed limit (a bulkhead, [NewFixed]) or one that adapts to the
// dependency's health ([NewAIMD], as Netflix's concurrency-limits does).
//
// A [Limiter] admits an attempt while fewer than its limit are in flight.
// When it is full, an attempt is refused at once with [ErrLimited], or,
// with [MaxWaiting], waits in a queue until a slot frees or its context is
// done, whichever comes first, so that a wait never outlives the call's
// time budget. A free slot goes to the oldest waiter, unless it has waited
// four times as long as it has left (it is late): then to the newest. Under
// overload, the oldest waiter has the least time left, and first come first
// served alone would send every attempt too late to be answered (after an
// outage, an adaptive limit then learns a failure from each and stays at
// its minimum). The cost: a queue that stands at nearly the callers' whole
// budget, where first come first served would still answer each just in
// time, serves the newest first, and some of the oldest run out of time
// waiting. And a backlog whose deadlines pass about as fast as it can be
// served, as after an outage, is served from both ends: newest first meets
// the oldest still waiting halfway, and half of it runs out. With
// [OldestOnTime], once the oldest is late, a free slot goes to the oldest
// waiter that still has time for an answer (more time left than the
// attempts sent from the queue took to be answered lately, on average), and
// with none to the newest: of such a backlog, all but the late are served
// (TestABacklogIsServedBeforeItsDeadlines: 319 of 400, against 200). Every
// attempt's timeout teaches an adaptive limit, also one that spent most of
// its time in the queue: the limit must fall when the dependency turns
// slower than the callers' budgets, and such a timeout may be all it hears
// of it; so after an outage, a dependency slower than a fifth of the
// callers' budget may be held below what it could serve for a while. In a
// pipeline, the timeouts that teach it are the pipeline's own (its attempt
// timeout, its time budget): an attempt that the caller's deadline ended
// teaches it nothing, since a caller's budget too short for an answer says
// nothing of the dependency (pipeline.WithLimit).
//
// An adaptive limit starts at [Initial] and moves by additive increase,
// multiplicative decrease (AIMD), as TCP's congestion window does: an
// attempt that ends in a failure of the dependency (an overload, a 503, a
// timeout: [resilience.Class] Failure) multiplies the limit by [Backoff],
// once a round trip: the failures of attempts sent before the last
// decrease are part of the same congestion and do not decrease it again,
// so a burst of timeouts costs one step, not one step each; each other
// attempt in flight at a moment the limit was in use (at least half of it
// in flight: as it was sent, as it ended, or between) raises it: by one
// until the first failure (slow start, doubling the limit each round
// trip), and after a failure by one over the limit (one a round trip)
// until it has doubled again. A limit not yet grown refuses what a burst
// brings beyond it: give a service whose calls come in bursts a queue
// ([MaxWaiting]), or an [Initial] limit that covers its bursts. So the limit settles near
// the concurrency the dependency can serve, with few failures, and falls
// fast when it cannot. Failures that do not depend on the load hold it
// lower: with 1% of attempts failing at random it settles near 30 (0.1%:
// near 100), whatever the dependency could serve, as loss-based AIMD does;
// so a dependency that fails a steady share of calls wants a fixed limit,
// or a [Backoff] nearer 1.
//
// In a pipeline (see pipeline.WithLimit) the limiter guards each attempt,
// retries and hedges included, inside the retry stage. A refused attempt's
// error is of class [resilience.ClassRejected]: not retried, not counted
// by the breaker, which counts a call whose retry it refused as the
// failure its sent attempt was (retrypolicy.Error.Answer).
package limit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/resiliencekit/resiliencekit/internal/classify"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// ErrLimited is the error of an attempt refused because the limit was
// reached (and its wait, if any, ended first). Its class is
// [resilience.ClassRejected].
var ErrLimited = resilience.Rejected(errors.New("concurrency limit reached"))

// Limiter caps the attempts in flight to one dependency. It is safe for
// concurrent use; an attempt takes its short lock twice, to acquire and to
// release, and allocates only when it has to wait. A nil *Limiter admits
// everything.
type Limiter struct {
	mu       sync.Mutex
	inFlight int
	limit    float64
	adaptive bool
	lo, hi   int // the bounds of the limit (n for a fixed one), as given: a float64 rounds past 2^53
	backoff  float64
	careful  float64 // below it the limit grows by one a round trip, not one an attempt
	round    uint64  // decreases so far: an attempt's Ticket holds the round it was sent in
	// inUse: at least half of the limit in flight; uses counts the spells
	// of it, so that an attempt's Release can tell that one began while it
	// was in flight (its Ticket holds the count as it was sent).
	inUse   bool
	uses    uint32
	waiting int // most attempts waiting
	// oldestOnTime: once the oldest waiter is late, a free slot goes to
	// the oldest with time for an answer, not to the newest (OldestOnTime).
	oldestOnTime bool
	queue        []*waiter // in the order they came, but for those moved to late
	late         []*waiter // waiters found late at the head of queue, in the order they came
	start        time.Time // what the times of the tickets granted from the queue count from
	// answer is how long the attempts granted from the queue took to be
	// answered, with OldestOnTime: a mean of their successes, moving an
	// eighth of the way to each; 0 from when a waiter finds the queue
	// empty until an answer comes.
	answer time.Duration
	extras []*extra // the slots AcquireExtra took and still holds, oldest first
	nextID uint32   // the id of the last extra slot
	heirs  int      // waiters that stopped an extra attempt (see AcquireExtra)
}

// extra is a slot that AcquireExtra took, what stops its attempt, and the
// attempt its slot goes to once it is given back, if one was stopped for.
type extra struct {
	tk      Ticket
	stop    func()
	stopped bool    // stop was called
	heir    *waiter // nil if it left
}

type waiter struct {
	ready    chan struct{}
	from     *extra // the extra attempt whose slot it waits for, not the queue
	granted  bool
	ticket   Ticket    // when granted
	since    time.Time // when it joined the queue
	deadline time.Time // its context's; the zero Time if none
}

// Ticket is what [Limiter.Acquire] gives an attempt it admits, to hand
// back to [Limiter.Release]: the round of the adaptive limit it was sent
// in, whether the limit was in use then, and when, if it waited. The zero
// Ticket holds no slot.
type Ticket uint64

const (
	slot   Ticket = 1 << 63 // set in every Ticket that holds a slot
	timed  Ticket = 1 << 62 // granted from the queue, at the time in the bits below
	msBits        = 30      // the time of a timed Ticket: milliseconds since the Limiter's start, mod 2^30 (12 days)
	extraT Ticket = 1 << 61 // without timed: taken by AcquireExtra, with an id in the bits below
	idBits        = 29
	// The low 32 bits: the round (mod 2^24), the spells of use (mod 2^7)
	// and whether the limit was in use as the attempt was sent. An attempt
	// in flight across exactly a multiple of 2^24 decreases decreases the
	// limit again, and one across exactly a multiple of 128 spells of use,
	// and not in use as it was sent or ended, does not raise it (review151).
	roundMask        = 1<<24 - 1
	usesShift        = 24
	usesMask         = 1<<7 - 1
	sentInUse Ticket = 1 << 31
)

// ticket returns the Ticket of an attempt sent now, counted in flight;
// l.mu is held.
func (l *Limiter) ticket() Ticket {
	tk := slot | Ticket(l.round&roundMask) | Ticket(l.uses&usesMask)<<usesShift
	if l.inUse {
		tk |= sentInUse
	}
	return tk
}

// timedTicket returns the Ticket of an attempt sent now from the queue,
// at now; l.mu is held.
func (l *Limiter) timedTicket(now time.Time) Ticket {
	return l.ticket() | timed | l.ms(now)<<32
}

// used notes whether the limit is in use (at least half of it in
// flight), after the attempts in flight or the limit changed, and counts
// a spell of use that begins; l.mu is held.
func (l *Limiter) used() {
	in := float64(l.inFlight)*2 >= l.limit
	if in && !l.inUse {
		l.uses++
	}
	l.inUse = in
}

// ms returns the time of now in a timed Ticket's bits.
func (l *Limiter) ms(now time.Time) Ticket {
	return Ticket(now.Sub(l.start)/time.Millisecond) & (1<<msBits - 1)
}

// Option configures a [Limiter]. [MaxWaiting] configures both kinds;
// [Initial], [Min], [Max] and [Backoff] only an adaptive one ([NewAIMD]).
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// aimdOption is an option of an adaptive Limiter only, which [NewFixed]
// refuses.
type aimdOption struct {
	name string
	f    func(*config)
}

func (o aimdOption) apply(c *config) {
	o.f(c)
	if c.aimdOnly == "" {
		c.aimdOnly = o.name
	}
}

type config struct {
	initial, min, max int
	backoff           float64
	waiting           int
	oldestOnTime      bool
	aimdOnly          string // the first option given that only NewAIMD takes
}

// NewFixed returns a Limiter of n attempts in flight: a bulkhead. Of the
// options, it takes only [MaxWaiting]. It panics if n is under 1, or
// names the option if given one of an adaptive Limiter ([Initial], [Min],
// [Max], [Backoff]), which would have no effect.
func NewFixed(n int, opts ...Option) *Limiter {
	if n < 1 {
		panic(fmt.Sprintf("limit: NewFixed(%d): n must be at least 1", n))
	}
	c := apply(config{}, opts)
	if c.aimdOnly != "" {
		panic(fmt.Sprintf("limit: NewFixed: option %s applies only to NewAIMD", c.aimdOnly))
	}
	return &Limiter{limit: float64(n), lo: n, hi: n, waiting: c.waiting, oldestOnTime: c.oldestOnTime, start: time.Now()}
}

// NewAIMD returns an adaptive Limiter: [Initial] 20, [Min] 1, [Max] 1000,
// [Backoff] 0.9, no waiting, changed by opts. It panics if Min > Initial or
// Initial > Max.
func NewAIMD(opts ...Option) *Limiter {
	c := apply(config{initial: 20, min: 1, max: 1000, backoff: 0.9}, opts)
	if c.min > c.initial || c.initial > c.max {
		panic(fmt.Sprintf("limit: NewAIMD: need Min (%d) <= Initial (%d) <= Max (%d)", c.min, c.initial, c.max))
	}
	return &Limiter{limit: float64(c.initial), adaptive: true, lo: c.min, hi: c.max,
		backoff: c.backoff, waiting: c.waiting, oldestOnTime: c.oldestOnTime, start: time.Now()}
}

func apply(c config, opts []Option) config {
	for _, o := range opts {
		if o != nil {
			o.apply(&c)
		}
	}
	return c
}

func atLeastOne(name string, n int) {
	if n < 1 {
		panic(fmt.Sprintf("limit: %s(%d): must be at least 1", name, n))
	}
}

// Initial sets the limit an adaptive Limiter starts at. Default 20. It
// panics if n is under 1; [NewFixed] panics if given it.
func Initial(n int) Option {
	atLeastOne("Initial", n)
	return aimdOption{"Initial", func(c *config) { c.initial = n }}
}

// Min sets the lowest limit of an adaptive Limiter. Default 1. It panics if
// n is under 1; [NewFixed] panics if given it.
func Min(n int) Option {
	atLeastOne("Min", n)
	return aimdOption{"Min", func(c *config) { c.min = n }}
}

// Max sets the highest limit of an adaptive Limiter. Default 1000. It
// panics if n is under 1; [NewFixed] panics if given it.
func Max(n int) Option {
	atLeastOne("Max", n)
	return aimdOption{"Max", func(c *config) { c.max = n }}
}

// Backoff sets the factor by which an adaptive Limiter's limit is
// multiplied on a failure of the dependency, once a round trip. Default
// 0.9. It panics unless 0.5 <= f < 1 (TCP halves its window: 0.5);
// [NewFixed] panics if given it.
func Backoff(f float64) Option {
	if math.IsNaN(f) || f < 0.5 || f >= 1 {
		panic(fmt.Sprintf("limit: Backoff(%v): f must be in [0.5, 1)", f))
	}
	return aimdOption{"Backoff", func(c *config) { c.backoff = f }}
}

// MaxWaiting lets up to n attempts wait for a slot when the limit is
// reached, first come first served (but see the package doc), each until
// its context is done. More
// are refused at once. Default 0: none waits. It applies to both kinds of
// Limiter. It panics if n is negative.
func MaxWaiting(n int) Option {
	if n < 0 {
		panic(fmt.Sprintf("limit: MaxWaiting(%d): n must be 0 or more", n))
	}
	return optionFunc(func(c *config) { c.waiting = n })
}

// OldestOnTime makes the queue of [MaxWaiting], once its oldest waiter is
// late, give a free slot to the oldest waiter, among the first 64, that
// has more time left than the attempts sent from the queue took to be
// answered (the mean of their successful answers lately, which a waiter
// finding the queue empty forgets), and with none, to the newest; not to
// the newest at once. It is for a backlog that the dependency, back from
// an outage, can serve about as fast as its deadlines pass, such as
// pipeline.WaitWhenOpen's, which uses it. Under an overload that lasts,
// newest first completes more: an answer time taken from calls of very
// different lengths, or from a dependency that refuses most attempts at
// once and answers the others slowly, sends some waiters with too little
// time (a review measured 2% to 7% fewer calls completed than newest first
// there). It applies to both kinds of Limiter. Default off.
func OldestOnTime() Option {
	return optionFunc(func(c *config) { c.oldestOnTime = true })
}

// Acquire takes a slot for an attempt, waiting for one if the Limiter
// lets it, until ctx is done. It returns a Ticket, and then the attempt
// must call [Limiter.Release] with it once it ends, or an error matching
// [ErrLimited]. With a ctx already done, it takes a free slot or refuses
// at once: it never waits, nor goes ahead of the attempts waiting.
func (l *Limiter) Acquire(ctx context.Context) (Ticket, error) {
	if l == nil {
		return 0, nil
	}
	l.mu.Lock()
	if float64(l.inFlight) < l.limit && len(l.queue) == 0 && len(l.late) == 0 {
		l.inFlight++
		l.used()
		tk := l.ticket()
		l.mu.Unlock()
		return tk, nil
	}
	n := l.waiters()
	var e *extra
	// The newest extra attempt that no waiter claims: its slot comes to
	// this attempt as it ends. With attempts waiting before it, only one
	// already stopped, whose slot is on its way back (review122).
	if i := l.unclaimed(n > 0); i >= 0 && ctx.Err() == nil && float64(l.inFlight-1) < l.limit {
		e = l.extras[i]
	} else if n >= l.waiting || ctx.Err() != nil {
		l.mu.Unlock()
		return 0, ErrLimited
	}
	if n == 0 && e == nil { // a queue again: how slow the dependency was when one last stood tells little of now
		l.answer = 0
	}
	w := &waiter{ready: make(chan struct{}), since: time.Now(), from: e}
	w.deadline, _ = ctx.Deadline()
	if e != nil { // it waits in the queue too, whatever MaxWaiting: the first slot to come is its
		if !e.stopped {
			e.stopped = true
			e.stop() // under the lock: before the extra's Release, which may not then hand on a slot whose attempt was never told (review122)
		}
		e.heir = w
		l.heirs++
	}
	l.queue = append(l.queue, w)
	l.mu.Unlock()

	select {
	case <-w.ready:
		if !w.granted { // an heir refused (handOn)
			return 0, ErrLimited
		}
		if ctx.Err() == nil {
			return w.ticket, nil
		}
		// Granted as ctx ended (select picks either when both are
		// ready): the slot goes to the next waiter, not to an attempt
		// whose caller is gone.
	case <-ctx.Done():
	}
	l.leave(w)
	return 0, ErrLimited
}

// AcquireExtra takes a slot for an attempt that its call may do without,
// such as a hedge, only while it leaves at least half of the limit's
// slots free and no attempt waits; else it refuses at once with an error
// matching [ErrLimited]. Such attempts so hold at most half of the limit.
// And an attempt that [Limiter.Acquire] would refuse or queue, the limit
// full, if it would admit one more without that extra
// attempt (an adaptive limit that just fell may not), claims the slot of
// the newest extra attempt that no other waiter claims (with attempts
// waiting before it, one already stopped), stopping it with stop if it
// was not (called once, under the Limiter's lock: it must return at once
// and not call the Limiter; a nil stop: none), and waits in the queue,
// while its context lasts, whatever
// [MaxWaiting], for the first slot to come, the stopped attempt's
// included (the limit allowing it then; if it does not, the attempt waits
// on as any other, within MaxWaiting, or is refused): a hedge that held a slot left a first
// attempt that came after it refused, where the same calls without hedges
// completed (review117, review119 to review122). A stopped attempt holds
// its slot until it is released: one slow to stop leaves the attempts
// waiting a slot short meanwhile (review123). Its stopped attempt's
// [Limiter.Release] teaches an adaptive limit nothing. The
// attempt must call Release with the Ticket once it ends. A nil *Limiter
// returns the zero Ticket.
func (l *Limiter) AcquireExtra(stop func()) (Ticket, error) {
	if l == nil {
		return 0, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if float64(l.inFlight+1) > l.limit/2 || len(l.queue) > 0 || len(l.late) > 0 {
		return 0, ErrLimited
	}
	l.inFlight++
	l.used()
	if stop == nil { // nothing stops it: its slot is its own
		return l.ticket(), nil
	}
	l.nextID = (l.nextID + 1) & (1<<idBits - 1)
	tk := l.ticket() | extraT | Ticket(l.nextID)<<32
	l.extras = append(l.extras, &extra{tk: tk, stop: stop})
	return tk, nil
}

// unclaimed returns the index of the newest extra attempt whose slot no
// waiter claims (stopped or not: the heir that stopped it may have been
// served another slot, or left), only among those stopped if stopped,
// -1 if none; l.mu is held.
func (l *Limiter) unclaimed(stopped bool) int {
	for i := len(l.extras) - 1; i >= 0; i-- {
		if e := l.extras[i]; e.heir == nil && (e.stopped || !stopped) {
			return i
		}
	}
	return -1
}

// handOn gives the slot of tk, an extra attempt's Ticket that ended, to
// the attempt that stopped it, if it still waits and the limit lets one
// more in without tk's (an adaptive limit may have fallen since), and
// forgets tk; it reports whether it did, and whether tk was stopped; l.mu
// is held.
func (l *Limiter) handOn(tk Ticket) (handed, stopped bool) {
	i := slices.IndexFunc(l.extras, func(e *extra) bool { return e.tk == tk })
	if i < 0 {
		return false, false // released twice
	}
	e := l.extras[i]
	l.extras = slices.Delete(l.extras, i, i+1)
	w := e.heir
	if w == nil {
		return false, e.stopped
	}
	l.disinherit(w)
	if float64(l.inFlight-1) >= l.limit {
		// It waits as any other now, if MaxWaiting lets it; else it is
		// refused, as any other would have been (review150: with
		// MaxWaiting(0), it waited out its context).
		if l.waiters() > l.waiting {
			l.unqueue(w)
			close(w.ready) // not granted
		}
		return false, true
	}
	l.unqueue(w)
	w.granted, w.ticket = true, l.ticket()
	close(w.ready)
	return true, true
}

// waiters returns how many attempts wait within MaxWaiting: heirs wait
// past it; l.mu is held.
func (l *Limiter) waiters() int { return len(l.queue) + len(l.late) - l.heirs }

// disinherit makes w, an heir, a waiter as any other; l.mu is held.
func (l *Limiter) disinherit(w *waiter) {
	w.from.heir, w.from = nil, nil
	l.heirs--
}

// Enter takes a slot for an attempt at once, past the limit if it is
// reached, and without a turn in the queue: for an attempt that must not
// wait or be refused, but whose load the Limiter should count (its slot
// delays the attempts that wait) and whose outcome it should learn from.
// The attempt must call [Limiter.Release] with the Ticket once it ends. A
// nil *Limiter returns the zero Ticket.
func (l *Limiter) Enter() Ticket {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	l.inFlight++
	l.used()
	tk := l.ticket()
	l.mu.Unlock()
	return tk
}

// leave takes w, whose context ended, out of the queue; a slot granted to
// it meanwhile goes to the next waiter.
func (l *Limiter) leave(w *waiter) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if w.granted {
		l.inFlight--
		l.used()
		l.grant(time.Time{})
		return
	}
	if w.from != nil { // the extra attempt's slot is given back as it ends
		l.disinherit(w)
	}
	l.unqueue(w)
}

// unqueue takes w out of whichever queue holds it; l.mu is held.
func (l *Limiter) unqueue(w *waiter) {
	for _, q := range [...]*[]*waiter{&l.queue, &l.late} {
		if i := slices.Index(*q, w); i >= 0 {
			*q = slices.Delete(*q, i, i+1)
			return
		}
	}
}

// Release gives back the slot of an attempt admitted with tk that ended
// with err (nil on success), which an adaptive Limiter learns from: a
// failure decreases the limit if the attempt was sent since the last
// decrease; a caller's cancellation, or an attempt not sent after all
// ([resilience.ClassRejected]), or an error whose methods panic as it is
// classified, teaches nothing. A zero tk does nothing.
// Release each Ticket once: a Ticket is a value, and a second Release of
// it gives back a slot that another attempt holds (the pipeline releases
// its own).
func (l *Limiter) Release(tk Ticket, err error) {
	if l == nil || tk == 0 {
		return
	}
	var c resilience.Class
	if l.adaptive {
		// Before the lock, which a panic would leave held.
		var ok bool
		if c, ok = classify.Safely(err); !ok {
			c = resilience.ClassCanceled
		}
	}
	l.mu.Lock()
	if tk&(timed|extraT) == extraT { // a timed Ticket's time may set extraT's bit
		handed, stopped := l.handOn(tk)
		if handed {
			l.mu.Unlock()
			return
		}
		if stopped {
			c = resilience.ClassCanceled
		}
	}
	if l.adaptive {
		l.learn(tk, c)
	}
	var now time.Time // read by grant if need be
	if tk&timed != 0 && err == nil {
		now = time.Now()
		l.answered(tk, now)
	}
	l.inFlight = max(l.inFlight-1, 0) // not below none, released twice
	l.used()
	l.grant(now)
	l.mu.Unlock()
}

// learn moves an adaptive limit by the class c of an attempt sent with
// tk; l.mu is held. A success raises it if the limit was in use at some
// moment of the attempt's flight: as it was sent, as it ends, or between
// (a spell of use began meanwhile). So a round trip's attempts that end
// together, the limit less in use with each, raise it each, as they did
// the limit's use (review150: a round of 20 released at once raised it to
// 27, not 40).
func (l *Limiter) learn(tk Ticket, c resilience.Class) {
	switch {
	case c.Failure():
		if tk&roundMask == Ticket(l.round&roundMask) { // not yet decreased for: a new congestion
			l.limit = max(float64(l.lo), l.limit*l.backoff)
			l.careful = 2 * l.limit
			l.round++
			l.used()
		}
	case c == resilience.ClassCanceled || c == resilience.ClassRejected:
	case tk&sentInUse != 0 || uint32(tk>>usesShift)&usesMask != l.uses&usesMask || l.inUse: // used() has seen every change since
		step := 1.0
		if l.limit < l.careful {
			step = 1 / l.limit
		}
		l.limit = min(float64(l.hi), l.limit+step)
	}
}

// answered takes in the answer time of an attempt granted from the queue
// with tk that succeeded at now; l.mu is held. A failure is not taken in:
// an overloaded dependency that refuses most attempts at once and answers
// the others slowly would seem fast, and an attempt cut short by its
// context, sent with too little time, would make the next ones seem to
// have enough.
func (l *Limiter) answered(tk Ticket, now time.Time) {
	sent := tk >> 32 & (1<<msBits - 1)
	d := time.Duration((l.ms(now)-sent)&(1<<msBits-1)) * time.Millisecond
	if l.answer == 0 {
		l.answer = d
	} else {
		l.answer += (d - l.answer) / 8
	}
}

// maxScan is how many waiters a free slot looks through for one on time
// (see the package doc): past them, the newest gets it.
const maxScan = 64

// grant hands free slots to the oldest waiters while the oldest is on
// time; once it is late, to the oldest that has more time left than the
// answer time, and with none to the newest; at now (the zero Time: read
// the clock if need be); l.mu is held.
func (l *Limiter) grant(now time.Time) {
	for (len(l.queue) > 0 || len(l.late) > 0) && float64(l.inFlight) < l.limit {
		if now.IsZero() {
			now = time.Now()
		}
		for len(l.queue) > 0 && overdue(l.queue[0], now) {
			l.late = append(l.late, l.take(0))
		}
		var w *waiter
		if len(l.late) == 0 { // the oldest is on time: first come first served
			w = l.take(0)
		} else if i := l.onTime(now); i >= 0 { // with OldestOnTime, the oldest with time enough
			w = l.take(i)
		} else { // the newest
			w = l.newest()
		}
		w.granted = true
		if w.from != nil { // an heir served before its stopped extra ended: that slot is given back as it does
			l.disinherit(w)
		}
		l.inFlight++
		l.used()
		if l.oldestOnTime {
			w.ticket = l.timedTicket(now)
		} else {
			w.ticket = l.ticket()
		}
		close(w.ready)
	}
}

// take takes waiter i out of the queue; those before it keep their
// place; l.mu is held.
func (l *Limiter) take(i int) *waiter {
	w := l.queue[i]
	copy(l.queue[1:i+1], l.queue[:i])
	l.queue[0] = nil
	l.queue = l.queue[1:]
	return w
}

// newest takes the newest waiter out of the queue, or with none there,
// out of the late ones; l.mu is held.
func (l *Limiter) newest() *waiter {
	q := &l.queue
	if len(*q) == 0 {
		q = &l.late
	}
	w := (*q)[len(*q)-1]
	(*q)[len(*q)-1] = nil
	*q = (*q)[:len(*q)-1]
	return w
}

// onTime returns, with OldestOnTime, the index of the first waiter in
// l.queue, among the first maxScan, with more time left than the answer
// time and not overdue; else -1; l.mu is held.
func (l *Limiter) onTime(now time.Time) int {
	if !l.oldestOnTime {
		return -1
	}
	for i, w := range l.queue[:min(len(l.queue), maxScan)] {
		if w.deadline.IsZero() || w.deadline.Sub(now) > l.answer && !overdue(w, now) {
			return i
		}
	}
	return -1
}

// overdue reports whether w has a quarter of the time it waited left, or
// less, at now: late for good, as time only shortens what it has left.
func overdue(w *waiter, now time.Time) bool {
	return !w.deadline.IsZero() && w.deadline.Sub(now) <= now.Sub(w.since)/4 // divided: a deadline a century off does not overflow
}

// Limit returns the current limit: the most attempts it lets hold a slot
// at once ([Limiter.Enter] aside). An adaptive limit moves by fractions,
// and lets attempts in while fewer than its fraction hold a slot: at 16.2,
// 17, and Limit says 17 (review117: it said 16).
func (l *Limiter) Limit() int {
	if l == nil {
		return math.MaxInt
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	c := math.Ceil(l.limit)
	if c >= math.MaxInt { // 2^63: past int
		return l.hi
	}
	return min(max(int(c), l.lo), l.hi)
}

// Waiting returns how many attempts wait for a slot.
func (l *Limiter) Waiting() int {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.queue) + len(l.late)
}

// InFlight returns how many attempts hold a slot.
func (l *Limiter) InFlight() int {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.inFlight
}
