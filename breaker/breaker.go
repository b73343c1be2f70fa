// Package breaker guards one dependency with a circuit breaker.
//
// A breaker is closed while the dependency is healthy and lets every call
// through, counting failures over a rolling window. When the failures reach a
// threshold ([ConsecutiveFailures] or [FailureRate]) it opens: every call is
// rejected at once with an error matching [ErrOpen], so a dead dependency
// gets no traffic and callers fail fast. After [OpenTimeout] it turns
// half-open and lets [HalfOpenRequests] probe calls through; if they all
// succeed it closes, and one failure opens it again. A probe that has not
// answered for 10 open timeouts lets another go.
//
// What counts as a failure follows the shared classes of package
// resilience: transient and terminal errors count; permanent errors (the
// caller's fault, such as HTTP 400) count as successes, since the dependency
// answered; cancellations by the caller, calls refused on the caller's
// side (class rejected), and calls whose op panicked or called
// runtime.Goexit (the caller's bug) are left out, and so are answers of
// class pending (a 409 "in progress": the dependency did nothing wrong). A
// call that its caller canceled, or a gate refused the retry of, after
// the dependency answered an attempt (in the backoff before a retry, or
// in the retry) counts by that answer (retrypolicy.Error.Answer): a
// failure if it was one, and otherwise left out, never a success; so
// callers who hang up while their calls retry still open a dead
// dependency's breaker (with hedging too: a race keeps the failed
// attempt's answer as its hedges come back canceled). [FailIf] changes
// what is a failure, and [IgnoreIf] leaves out more; both are asked of
// that answer, not of the cancellation.
//
// A call that its context's deadline ended (the caller's, or a budget an
// upstream sent) in its one attempt is left out too, as the caller's
// doing, if it had less time than the dependency's answers may take: the
// slowest answer of the last minute, and 100 ms at least. The breaker
// times, from their admission, the first 16 answers of every 10 s and one
// in 16 after them, drawn at random (through a pipeline, a retry's from
// when it was sent: its backoff, a Retry-After among it, is the caller's
// time, not the dependency's; a hedge that wins from its race's first
// attempt); it takes each other answer to have
// lasted until the latest admission; it keeps the slowest of each 10 s
// for 60 to 80 s. A call canceled that ends within 10 ms of its deadline
// is taken for one its deadline ended (a caller upstream, told its budget
// rounded up, hangs up a moment before this hop's deadline). A call that
// a retry policy ran more than once counts by the answer before the
// attempt that the deadline ended: a failure if it was one (the
// dependency failed before the deadline), left out if not (of class
// pending, or one that IgnoreIf leaves out, review132). So a budget
// under 100 ms, or under the slowest recent answer, never opens the
// breaker by running out; a dependency that hangs opens it through the
// calls that had more, and, once its slowest answer is over 80 s old,
// through every call that had 100 ms. So does a new breaker, which has
// timed no answer yet: callers whose deadlines are over 100 ms and under
// a healthy dependency's answers (150 ms against 200, say) can open it
// before its first answer comes, for an open timeout, until a probe with
// more time closes it. One breaker for calls of very different lengths (a
// long poll beside short reads) takes the short calls' budgets by the long
// ones'. A wait at a pipeline's concurrency limit counts in both, an
// answer's time and the time a call had: a dependency that hangs frees
// the limit's slots only as deadlines pass, so that its attempts are sent
// from the queue with little time left, and counted so, they open the
// breaker. A queue that stands in front of a healthy dependency whose
// answers take most of the callers' budgets sends attempts too late as
// well, and may open it too, which serves more of those callers than the
// queue did (review108: 79 calls of 300 completed against 4 with a
// breaker that never opens).
//
// One Breaker serves every call to its dependency, whatever the result
// type, and is safe for concurrent use. The zero Breaker is always closed:
// it runs every call and counts nothing; make one with [New].
package breaker

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/resiliencekit/resiliencekit/internal/monotime"
	"github.com/resiliencekit/resiliencekit/internal/safe"
	"github.com/resiliencekit/resiliencekit/internal/sendtime"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// Errors of calls the breaker rejects, matched with [errors.Is]. The errors
// that a Breaker returns also name it, and their class is
// [resilience.ClassTerminal]: not retried, and a failure to any breaker
// further out.
var (
	// ErrOpen means the breaker is open and the call was not made.
	ErrOpen = errors.New("circuit breaker is open")
	// ErrTooManyRequests means the breaker is half-open and its probe calls
	// are all in flight, so the call was not made.
	ErrTooManyRequests = errors.New("circuit breaker is half-open and busy")
)

// IsRejection reports whether err says a breaker did not make the call:
// it matches [ErrOpen] or [ErrTooManyRequests].
func IsRejection(err error) bool {
	if _, ok := err.(*rejection); ok {
		return true // a breaker's own, as it returns them: no chain to walk
	}
	return errors.Is(err, ErrOpen) || errors.Is(err, ErrTooManyRequests)
}

// Counts are the outcomes a breaker has seen in its current state (in the
// closed state, within its rolling window). They are cleared on every change
// of state; a closed window that reaches 2^31 calls (one without an end,
// Window(0), or a long one) halves them, keeping their shares.
type Counts struct {
	// Requests counts the calls admitted, finished or not.
	Requests uint32
	// TotalSuccesses, TotalFailures and TotalExclusions count finished
	// calls by how they were counted; an exclusion is neither (a caller's
	// cancellation, by default).
	TotalSuccesses  uint32
	TotalFailures   uint32
	TotalExclusions uint32
	// ConsecutiveSuccesses and ConsecutiveFailures count the current run
	// of each.
	ConsecutiveSuccesses uint32
	ConsecutiveFailures  uint32
}

// rejection is a breaker's own error for a rejected call.
type rejection struct {
	name     string
	sentinel error
}

func (r *rejection) Error() string {
	return "breaker " + strconv.Quote(r.name) + ": " + r.sentinel.Error()
}

func (r *rejection) Unwrap() error { return r.sentinel }

func (r *rejection) ResilienceClass() resilience.Class { return resilience.ClassTerminal }

// Breaker is a circuit breaker for one dependency. It is safe for
// concurrent use. The zero Breaker, and a nil *Breaker, is always closed and
// counts nothing.
type Breaker struct {
	name     string
	cb       *core
	cfg      config
	listener *safe.Listener // WithListener's: hears everything, rejections included
	audience audience       // Listen's: hear state changes
	state    atomic.Uint32  // last State seen by a transition, for Check
	errOpen  error
	errBusy  error
	fleet    *fleet // nil unless the state is shared
	wait     waiting
	// SetMode's (force.go): nil in Normal, read on every call.
	force        atomic.Pointer[forcing]
	normal       atomic.Pointer[Forcing] // the last change back to Normal
	forceMu      sync.Mutex
	openedBefore atomic.Int64  // the wait queue's openedAt before ForcedOpen
	forceSeen    atomic.Uint64 // the fleet's ForceVersion last taken; written by the flusher
	forceTaken   Forcing       // the mode taken under it; the flusher's
	resend       resend        // a fleet-wide mode the store did not take
	history      history
}

// New returns a closed Breaker named name (the name appears in its errors
// and state changes), configured by opts. Defaults: open after 5
// consecutive failures, counted over a 60 s window of 6 buckets; stay open
// 100 ms; 1 probe call when half-open.
func New(name string, opts ...Option) *Breaker {
	cfg := defaults()
	for _, o := range opts {
		if o != nil {
			o.apply(&cfg)
		}
	}

	b := &Breaker{
		name:    name,
		cfg:     cfg,
		errOpen: &rejection{name: name, sentinel: ErrOpen},
		errBusy: &rejection{name: name, sentinel: ErrTooManyRequests},
	}
	b.listener = safe.New(name, cfg.listeners...)
	b.cb = newCore(cfg.halfOpenRequests, cfg.openTimeout, cfg.window, cfg.buckets, func(n Counts) bool {
		// A shared breaker applies the failure rate to its own calls only
		// while it decides alone: the fleet's is the rule.
		trip := cfg.readyToTrip(n, b.fleet == nil || b.fleet.local())
		if trip {
			b.history.trip = n // for the reason, under the core's lock
		}
		return trip
	}, func(from, to resilience.State) {
		b.state.Store(uint32(to))
		b.changed(name, from, to, false)
	})
	if cfg.shared != nil {
		b.startFleet()
	}
	return b
}

// changed reports a change of state of the breaker called name.
func (b *Breaker) changed(name string, from, to resilience.State, fleet bool) {
	b.record(from, to, fleet)
	b.changedWaiting(to, fleet)
	b.holdForced()
	b.emit(resilience.Event{Kind: resilience.EventStateChange, Name: name, From: from, To: to})
}

// fleetChanged reports a change of state of the fleet breaker, named
// "NAME (fleet)".
func (b *Breaker) fleetChanged(from, to resilience.State) {
	b.changed(b.Name()+" (fleet)", from, to, true)
}

// Name returns the breaker's name.
func (b *Breaker) Name() string {
	if b == nil || b.cb == nil {
		return ""
	}
	return b.name
}

// State returns the current state, moving from open to half-open if the
// open timeout has passed. A shared breaker's is the fleet's when the
// fleet's is not closed (see [Breaker.FleetState]), and its own otherwise.
// A breaker forced open ([Breaker.SetMode]) is open, one forced closed is
// closed; a disabled one's is the state it would be in.
func (b *Breaker) State() resilience.State {
	if b == nil || b.cb == nil {
		return resilience.StateClosed
	}
	if f := b.force.Load(); f != nil {
		if st, ok := f.state(b); ok {
			return st
		}
	}
	if b.fleet != nil {
		if st := b.fleet.view(); st != resilience.StateClosed {
			return st
		}
	}
	return b.cb.State()
}

// Counts returns the outcomes this breaker counted in its current state
// (for a shared breaker, this replica's own).
func (b *Breaker) Counts() Counts {
	if b == nil || b.cb == nil {
		return Counts{}
	}
	return b.cb.Counts()
}

// Check returns nil if the breaker was closed when it last changed state
// (a shared one: and the fleet's, when last synced), and otherwise an
// error matching [ErrOpen]. It takes no lock (a shared breaker's, but once,
// as it finds the fleet's state unconfirmed), so a retry loop can ask it
// before every retry and stop as soon as another call has opened the
// breaker. A breaker forced open returns its rejection ([ErrForcedOpen]),
// one forced closed or disabled nil. Use [Breaker.State] for the exact
// state.
func (b *Breaker) Check() error {
	if b == nil {
		return nil
	}
	if f := b.force.Load(); f != nil {
		return f.check()
	}
	if resilience.State(b.state.Load()) == resilience.StateClosed && (b.fleet == nil || b.fleet.view() == resilience.StateClosed) {
		return nil
	}
	return b.errOpen
}

// Execute calls op if the breaker admits the call, and counts its outcome.
// A rejected call returns an error matching [ErrOpen] or
// [ErrTooManyRequests] without calling op. A ctx already done returns
// ctx.Err() without taking a probe slot, as does one that ends while the
// call waits for the store to grant this replica the fleet's probe
// ([Shared]). op's error is returned as it is. If
// op panics or calls [runtime.Goexit], the panic or Goexit goes on, and
// the breaker counts the call neither way (unlike gobreaker, which counts
// a failure): it is the caller's bug, which says nothing of the
// dependency, and calls that panic must not open the breaker for those
// that do not. A half-open probe that panics frees its slot for the next
// call. An error that panics as it is counted (a method of its own, such
// as a typed nil's Unwrap, or [FailIf]'s test) counts as a failure, and is
// returned. A forced mode ([Breaker.SetMode]) decides before the breaker does: forced
// open rejects with an error matching [ErrForcedOpen] and [ErrOpen].
func (b *Breaker) Execute(ctx context.Context, op func(ctx context.Context) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if b == nil || b.cb == nil {
		return op(ctx)
	}
	if f := b.force.Load(); f != nil {
		return b.executeForced(ctx, f, op)
	}
	return b.executeNormal(ctx, op)
}

// executeNormal is Execute in the Normal mode.
func (b *Breaker) executeNormal(ctx context.Context, op func(ctx context.Context) error) error {
	if b.fleet != nil {
		return b.executeShared(ctx, op)
	}
	_, err := b.executeOn(ctx, op)
	return err
}

// executeOn runs op through b's own breaker, counting a panic or
// runtime.Goexit in op neither way, and returns how the call counted (a
// refusal's is never read) and op's error.
func (b *Breaker) executeOn(ctx context.Context, op func(ctx context.Context) error) (outcome, error) {
	v, a := b.cb.admit()
	switch v {
	case refusedOpen:
		return failed, b.reject(b.errOpen)
	case refusedBusy:
		return failed, b.reject(b.errBusy)
	}
	returned := false
	defer func() {
		if !returned { // a panic or Goexit, which goes on: the caller's bug, not a verdict
			b.cb.done(a, excluded)
			b.probeIgnored()
		}
	}()
	err := op(ctx)
	out := counted
	if err != nil {
		if a.at, err = sendtime.Open(a.at, err); err != nil {
			out = b.count(ctx, err, a)
		}
	}
	returned = true
	b.cb.done(a, out)
	if out == excluded {
		b.probeIgnored()
	}
	return out, err
}

// reject reports a rejection to b's own listener (the caller's hears of
// it from the error) and returns err.
func (b *Breaker) reject(err error) error {
	if b.listener != nil { // no event built for no listener: a rejection is the fast path of an outage
		b.listener.OnEvent(resilience.Event{Kind: resilience.EventRejected, Name: b.Name(), Err: err})
	}
	return err
}

// count says how a call admitted as a that ended with err counts: a
// failure if telling panicked (a FailIf's, or a method of err's such as a
// typed nil's Unwrap), though the call returns err as a plain client
// would, not the panic.
func (b *Breaker) count(ctx context.Context, err error, a admission) (out outcome) {
	defer func() {
		if recover() != nil {
			out = failed
		}
	}()
	if answer := answerOf(err); answer != nil {
		// Judged by what the dependency answered, and only as a failure
		// (the call did not succeed): how the call then ended says
		// nothing more.
		if b.judgeAnswer(answer) == failed {
			return failed
		}
		return excluded
	}
	out = b.judge(ctx, err)
	switch {
	case out == excluded && b.hungUp(ctx, err):
		// A caller upstream that hung up as its deadline came: told the
		// budget rounded up (package deadline), this hop's deadline comes
		// a moment after, and the hang-up first. As the deadline.
		out = failed
		if b.cutShort(ctx, err, a, hopMargin) {
			out = excluded
		}
	case out == failed && b.cutShort(ctx, err, a, 0):
		out = excluded
	}
	return out
}

// hopMargin is how near its deadline a call canceled by its caller must
// end to be taken for one its deadline ended: the budget a hop is told is
// rounded up to the millisecond, and the request took time to come.
const hopMargin = 10 * time.Millisecond

// hungUp reports whether a call that ended with err was canceled (not by
// IgnoreIf) and ended within hopMargin of its context's deadline, before
// or after: an operation returns as soon as it is canceled, and one that
// ends far from its deadline was canceled before it came.
func (b *Breaker) hungUp(ctx context.Context, err error) bool {
	if !errors.Is(ctx.Err(), context.Canceled) && resilience.Classify(err) != resilience.ClassCanceled ||
		b.cfg.ignoreIf != nil && b.cfg.ignoreIf(err) {
		return false
	}
	dl, ok := ctx.Deadline()
	left := time.Until(dl)
	return ok && left <= hopMargin && left >= -hopMargin
}

// cutShort reports whether a call admitted as a, which failed with err,
// was ended by its caller's deadline (that of ctx) in a way that says
// nothing of the dependency (see core.cutShort), in its one attempt: a
// call that a retry policy ran more than once had a failure of the
// dependency's before the deadline came.
func (b *Breaker) cutShort(ctx context.Context, err error, a admission, margin time.Duration) bool {
	dl, ok := ctx.Deadline()
	if !ok {
		return false
	}
	// Passed by the clock (within margin), whether or not ctx has heard
	// of it yet: a hop told the caller's budget (package deadline,
	// grpc-timeout) may answer as it runs out, a moment before the
	// caller's timer fires.
	left := time.Until(dl)
	if left > margin && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return false
	}
	if re := (*retrypolicy.Error)(nil); errors.As(err, &re) && re.Attempts > 1 {
		return false
	}
	return b.cb.cutShort(a.at, left+monotime.Since(a.at)) // its budget, however late the operation returned
}

// judge says how a call that ended with err, and carries no answer of the
// dependency's (see count), counts.
func (b *Breaker) judge(ctx context.Context, err error) outcome {
	if err == nil {
		return counted
	}
	if errors.Is(ctx.Err(), context.Canceled) {
		return excluded
	}
	return b.judgeAnswer(err)
}

// answerOf returns the answer of err, a retry loop's error as the loop
// returned it, or the answer in its last attempt's (a pipeline that made
// one attempt wraps its operation's error so: a nested loop's, a hedged
// race's); nil if none.
func answerOf(err error) error {
	re, ok := err.(*retrypolicy.Error)
	for depth := 0; ok && depth < maxNesting; depth++ {
		if a := re.Answer(); a != nil {
			return a
		}
		var a error
		if re, a, ok = answerIn(re.Last); a != nil {
			return a
		}
	}
	return nil
}

// maxNesting bounds the errors answerOf and loopIn look through: an
// error that holds itself ends too.
const maxNesting = 100

// answerIn returns the first retry loop's error in err's chain (Unwrap()
// error), or the answer of another error there that has one (a hedged
// race's); it allocates nothing, unlike errors.As, as a failing call asks
// it.
func answerIn(err error) (*retrypolicy.Error, error, bool) {
	for range maxNesting {
		switch e := err.(type) {
		case *retrypolicy.Error:
			return e, nil, true
		case interface{ Answer() error }:
			return nil, e.Answer(), false
		case interface{ Unwrap() error }:
			err = e.Unwrap()
		default:
			return nil, nil, false
		}
	}
	return nil, nil, false
}

// judgeAnswer says how an error that ended a call counts, by its class,
// IgnoreIf and FailIf.
func (b *Breaker) judgeAnswer(err error) outcome {
	c := resilience.Classify(err)
	if c == resilience.ClassCanceled || c == resilience.ClassRejected || c == resilience.ClassPending ||
		b.cfg.ignoreIf != nil && b.cfg.ignoreIf(err) {
		return excluded
	}
	if b.cfg.failIf != nil {
		if b.cfg.failIf(err) {
			return failed
		}
		return counted
	}
	if c.Failure() {
		return failed
	}
	return counted
}
