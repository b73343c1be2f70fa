package resilience

import "time"

// EventKind says what an [Event] reports.
type EventKind uint8

// The kinds of events the stages report.
const (
	// EventAttempt: an attempt ended; Attempt is its number (1 for the
	// first), Err its error, nil on success.
	EventAttempt EventKind = iota + 1
	// EventRetry: a retry is scheduled after attempt Attempt failed with
	// Err, in Delay.
	EventRetry
	// EventRetriesExhausted: every allowed attempt failed; Err is the last
	// error.
	EventRetriesExhausted
	// EventQuotaExhausted: the retry quota had no retry left.
	EventQuotaExhausted
	// EventTimeBudgetExceeded: the call ran out of time.
	EventTimeBudgetExceeded
	// EventStateChange: a breaker went From one state To another.
	EventStateChange
	// EventRejected: a breaker rejected a call (Attempt 0), as it came or
	// as an attempt of it was about to be sent (the pipeline's re-check),
	// or stopped its retries after attempt Attempt (as the guard of the
	// retry loop); Err says why.
	EventRejected
	// EventCallDone: a pipeline call ended after Duration; Err is its
	// error, nil on success.
	EventCallDone
	// EventSharedStateUnavailable: a breaker, or an idempotency guard,
	// lost its shared state store (Err says why) and goes on with its
	// local state.
	EventSharedStateUnavailable
	// EventSharedStateRestored: a breaker, or an idempotency guard,
	// reached its shared state store again.
	EventSharedStateRestored
	// EventNotRetried: a call made to have a single attempt (a write
	// without an idempotency key, or a body that could not be kept) failed
	// with Err, an error that would otherwise have been retried; or an
	// attempt failed with an error marked [Unrepeatable] (a stream past its
	// replay buffer), which the retry stage gives up on.
	EventNotRetried
	// EventStoreFailed: a store of shared state (such as idempotency
	// records) failed; Err says how. The request got an error or went on
	// without it.
	EventStoreFailed
	// EventLeaseLost: a request holding an idempotency key lost its lease
	// (it expired and was claimed anew, or could not be renewed); Err says
	// why. Its handler's context is canceled.
	EventLeaseLost
	// EventNotStored: a request's result could not be stored under its
	// idempotency key (Err says why): the key stays claimed until its lease
	// runs out, then a retry runs the request again.
	EventNotStored
	// EventThrottled: the client-side throttle refused attempt Attempt on
	// the caller's side, because the dependency has been refusing work
	// (package throttle); Err says so.
	EventThrottled
	// EventLimited: the concurrency limit refused attempt Attempt, full
	// (its wait, if any, ran out of time); Err says so.
	EventLimited
	// EventHedged: attempt Attempt was sent as a hedge, Delay after the
	// one before it, which was still running (package hedge): reported as
	// its operation is called, so also for a hedge the operation then
	// refuses as the caller's (class rejected: httpclient's while the first
	// attempt reads a streamed body), which the call does not count as
	// sent (pipeline.Hedged) but hedge.MaxShare's budget does, and for one
	// that a listener slow to take this event held up until its race was
	// decided, its breaker opened, or the attempt before it failed with no
	// other hedge out: that one is then not sent.
	EventHedged
	// EventWaitOpen: a call found the breaker open and waits, within its
	// time budget, for it to close instead of failing (pipeline's
	// WaitWhenOpen); Err is the rejection.
	EventWaitOpen
)

// String returns the kind's name in snake case, such as "retry".
func (k EventKind) String() string {
	switch k {
	case EventAttempt:
		return "attempt"
	case EventRetry:
		return "retry"
	case EventRetriesExhausted:
		return "retries_exhausted"
	case EventQuotaExhausted:
		return "quota_exhausted"
	case EventTimeBudgetExceeded:
		return "time_budget_exceeded"
	case EventStateChange:
		return "state_change"
	case EventRejected:
		return "rejected"
	case EventCallDone:
		return "call_done"
	case EventSharedStateUnavailable:
		return "shared_state_unavailable"
	case EventSharedStateRestored:
		return "shared_state_restored"
	case EventNotRetried:
		return "not_retried"
	case EventStoreFailed:
		return "store_failed"
	case EventLeaseLost:
		return "lease_lost"
	case EventNotStored:
		return "not_stored"
	case EventThrottled:
		return "throttled"
	case EventLimited:
		return "limited"
	case EventHedged:
		return "hedged"
	case EventWaitOpen:
		return "wait_open"
	default:
		return "unknown"
	}
}

// Event is one thing that happened in a stage. Fields that do not apply to
// its Kind are zero.
type Event struct {
	// Kind says what happened.
	Kind EventKind
	// Name is the dependency's name: the breaker's, or the pipeline's.
	Name string
	// Attempt is the attempt's number, 1 for the first.
	Attempt int
	// Delay is the wait before a retry.
	Delay time.Duration
	// Duration is how long a call took; zero if Untimed.
	Duration time.Duration
	// Err is the error of the attempt or call, or why a call was rejected.
	Err error
	// From and To are the breaker's states before and after an
	// EventStateChange.
	From, To State
	// Untimed marks an EventCallDone of a call that was not timed: its
	// Duration is zero. Only a [CallTimer] that declined to time the call
	// gets one; every other listener that wants the end of a call gets it
	// timed.
	Untimed bool
}

// State is a circuit breaker's state. The zero State is [StateClosed].
type State uint8

// The states of a circuit breaker.
const (
	// StateClosed lets every call through.
	StateClosed State = iota
	// StateHalfOpen lets a few probe calls through.
	StateHalfOpen
	// StateOpen rejects every call.
	StateOpen
)

// String returns "closed", "half-open" or "open".
func (s State) String() string {
	switch s {
	case StateClosed:
		return "closed"
	case StateHalfOpen:
		return "half-open"
	case StateOpen:
		return "open"
	default:
		return "unknown"
	}
}

// Listener receives events. OnEvent is called synchronously on the
// goroutine of the call, so it must be quick: the call waits for it, and a
// listener that blocks holds up the call, past its time budget if need be.
// It must be safe for concurrent use. Breaker state changes are reported
// while the breaker holds its lock, so it must not call the breaker. A
// panic in OnEvent is logged with log/slog's default logger and changes
// nothing else: the call and the breaker see the outcome they would have
// seen. One that calls runtime.Goexit (testing.T.FailNow) ends the call's
// goroutine, as an operation's does; if it hears of a hedge, on the
// hedge's goroutine, the call's goroutine ends too once the first attempt
// returns, and the hedge's slots of the gates are given back. A stage with
// no listener builds no events.
type Listener interface {
	OnEvent(Event)
}

// Filter is implemented by a [Listener] that wants only some kinds of
// event. A stage may skip an event its listener does not want, and skips
// [EventCallDone], with the two clock reads its Duration costs, for a
// listener that does not want it. Wants may be called on every call, and
// must be quick and safe for concurrent use. A pipeline asks it once a
// call for each kind it may emit many of ([EventAttempt], [EventCallDone]),
// at the start: its answer holds for that call. A Filter that wants the
// end of every call but not every call timed is a [CallTimer].
type Filter interface {
	Wants(EventKind) bool
}

// CallTimer is implemented by a [Filter] that wants the end of every call
// ([EventCallDone]) but its Duration of only some, such as a sample, so
// that the other calls pay for no clock read. A pipeline that asked
// Wants(EventCallDone) as a call started and heard yes then asks TimeCall,
// unless another listener has already had the call timed: if it says no
// and no other listener wants the call timed, the call is not timed, and
// its EventCallDone has Untimed set and a zero Duration. A call that
// another listener has timed comes timed to it too. TimeCall must be
// quick and safe for concurrent use.
type CallTimer interface {
	Filter
	TimeCall() bool
}

// Wants reports whether l wants events of kind k: true unless l is a
// [Filter] that says otherwise; false for a nil l.
func Wants(l Listener, k EventKind) bool {
	if l == nil {
		return false
	}
	if f, ok := l.(Filter); ok {
		return f.Wants(k)
	}
	return true
}

// ListenerFunc adapts a function to a [Listener] that wants every event.
type ListenerFunc func(Event)

// OnEvent calls f(e).
func (f ListenerFunc) OnEvent(e Event) { f(e) }
