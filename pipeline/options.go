package pipeline

import (
	"fmt"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/internal/safe"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/throttle"
)

// Option configures a [Pipeline]. Options are not tied to a result type.
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	breaker        *breaker.Breaker
	retry          *retrypolicy.Policy
	givenRetry     *retrypolicy.Policy // WithRetry's, for Stages: retry has the listener added
	budget         time.Duration
	attemptTimeout time.Duration
	name           string
	listeners      []resilience.Listener // until New combines them
	listener       *safe.Listener
	rejected       *safe.Listener // listener less what the breaker tells of its rejections
	throttle       *throttle.Throttle
	limit          *limit.Limiter
	hedge          *hedge.Policy
	waitOpen       bool
	tracer         resilience.Tracer
	gates          []gate       // what admits each attempt, in order; built by New
	pacer          *pacer       // WaitWhenOpen's gate, also in gates
	attemptFollows bool         // nothing waits between the budget and the first attempt; set by New
	intoBreaker    bool         // the stages before the breaker's have nothing to do but time a call; set by New
	hedgeTimers    *hedgeTimers // with hedging: its races' one timer; made by New
	spare          *spareHedged // with hedging: a call's memory for the next; made by New
}

// WithBreaker guards calls with b, shared by every pipeline calling the
// same dependency. Default none; nil means none, and takes out a breaker
// given before while keeping its name as the pipeline's ([WithName]):
// p.With(WithBreaker(nil)) calls the same dependency, unguarded, under the
// name its events had.
func WithBreaker(b *breaker.Breaker) Option {
	return optionFunc(func(c *config) {
		if b == nil && c.breaker != nil && c.name == "" {
			c.name = c.breaker.Name()
		}
		c.breaker = b
	})
}

// WithRetry retries failed attempts by policy p; its [retrypolicy.Quota],
// if any, caps the retries. Default none: one attempt; nil means none.
func WithRetry(p *retrypolicy.Policy) Option {
	return optionFunc(func(c *config) { c.retry = p })
}

// WithTimeBudget caps each call, all attempts and delays included, at d;
// the operation's context carries the deadline. It is the only time budget
// option: the retry policy keeps to it. Default none (only the caller's
// context's deadline); 0 means none. It panics if d is negative.
func WithTimeBudget(d time.Duration) Option {
	if d < 0 {
		panic(fmt.Sprintf("pipeline: WithTimeBudget(%v): d must be 0 (none) or more", d))
	}
	return optionFunc(func(c *config) { c.budget = d })
}

// WithAttemptTimeout caps each single attempt at d, within the budget; an
// attempt that times out is a transient failure and may be retried. Its
// error matches [ErrAttemptTimeout] and [context.DeadlineExceeded], and
// says "attempt timeout"; a call whose budget ran out says "time budget
// exhausted" instead ([retrypolicy.ErrOutOfTime]). Default none; 0 means
// none. It panics if d is negative.
func WithAttemptTimeout(d time.Duration) Option {
	if d < 0 {
		panic(fmt.Sprintf("pipeline: WithAttemptTimeout(%v): d must be 0 (none) or more", d))
	}
	return optionFunc(func(c *config) { c.attemptTimeout = d })
}

// WithName names the dependency in events. Default the breaker's name.
func WithName(name string) Option {
	return optionFunc(func(c *config) { c.name = name })
}

// WithListener reports to l everything the pipeline does, named by
// [WithName]: the end of every call, each attempt, each scheduled retry,
// why a call gave up, its rejections, waits, refusals and hedges; and the
// state changes of its breaker, whichever pipelines share that breaker and
// in whatever order they were built (see [breaker.Breaker.Listen]). See
// [resilience.Listener] for what l must do. Several listeners each hear
// every event they want. Default none, at no cost.
func WithListener(l resilience.Listener) Option {
	return optionFunc(func(c *config) {
		if l != nil {
			c.listeners = append(c.listeners, l)
		}
	})
}

// WithThrottle guards each attempt with t, adaptive client-side throttling
// shared by every pipeline calling the same dependency: while the
// dependency refuses work, attempts are refused locally with an error
// matching [throttle.ErrThrottled], of class [resilience.ClassRejected],
// and reported as [resilience.EventThrottled]; the breaker counts a call
// whose retry is refused so as the failure of the attempt it sent
// (retrypolicy.Error.Answer). A probe of a breaker not closed passes the
// throttle, uncounted: the breaker holds the load to its probes. An
// attempt that the caller's deadline ended is taken back, as one the
// caller canceled: a budget too short for an answer says nothing of the
// dependency (the attempt timeout's and the time budget's count). Default
// none; nil means none.
func WithThrottle(t *throttle.Throttle) Option {
	return optionFunc(func(c *config) { c.throttle = t })
}

// WithLimit guards each attempt with l, a concurrency limit shared by
// every pipeline calling the same dependency: an attempt beyond it is
// refused with an error matching [limit.ErrLimited], of class
// [resilience.ClassRejected] and reported as [resilience.EventLimited], or
// waits for a slot within the time budget if l lets it. An adaptive l
// learns nothing from an attempt that the caller's deadline ended, as
// [WithThrottle]: give the pipeline an attempt timeout or a time budget,
// so that it learns of a dependency that turns slow. A hedge takes a slot
// only while at least half of l's stay free and none is waited for, or is
// refused ([limit.Limiter.AcquireExtra]): it never waits in l's queue,
// and hedges hold at most half of l (with a limit under 4, the twin's
// slot alone is half: no hedge is sent). An attempt that finds l full,
// nothing waiting, stops the newest hedge and waits, whatever l's queue,
// for the first slot to come, the hedge's as it returns included: the
// hedge's context is canceled, and it is no answer of its call unless it
// succeeded (a streamed one, [DoStream], never is), so that hedges do not
// cost another call's attempt its slot (review117, review119 to
// review122). A stopped hedge still holds its slot until its operation
// returns: one that is slow to heed its context's cancellation leaves the
// attempts waiting meanwhile (the one that stopped it, or those after it)
// a slot short for as long, and one of them may run out of time where,
// without hedging, it was served (review123). A slot is held while op
// runs: a result still read after op returns ([DoStream], such as an
// HTTP response's body) holds none. Default none; nil means none.
func WithLimit(l *limit.Limiter) Option {
	return optionFunc(func(c *config) { c.limit = l })
}

// WithHedging sends a twin of an attempt still running after h's delay,
// up to h's limit, and returns the first success, canceling the others
// (see [Discard] for what becomes of their results). Only calls that may
// be repeated are hedged: not a [SingleAttempt] call. The operation must
// be safe to run concurrently with itself. Hedges have a budget of their
// own (hedge.MaxShare, 10% of the calls by default), apart from the retry
// quota, which they do not draw on, so that hedging cannot starve
// retries; none is sent once the breaker has opened or an attempt failed
// with an error that is not retried. A hedged group of attempts counts as
// one attempt of the retry stage; each hedge is reported as
// [resilience.EventHedged]. A hedge that the gates refuse (throttle,
// concurrency limit, WaitWhenOpen's pacer, the breaker's re-check) is not
// sent and not reported as a refusal: its call goes on with the attempt
// out, and is not refused; it counts against hedge.MaxShare's budget as
// one sent (review117). A call that failed after a hedge was sent
// says so ([Hedged]): the dependency got it twice, and retrysignal tells
// the caller not to retry it, as after a retry. Default none; nil means
// none.
//
// The first attempt runs on the caller's goroutine, and a call whose first
// attempt answers in time costs one allocation and a place in the
// pipeline's one timer for hedging delays, no timer or goroutine of its
// own; each hedge runs on a goroutine of its own. A hedge that succeeds cancels the first
// attempt, whose operation must then return for the call to return the
// hedge's answer: an operation that ignores its context's cancellation
// holds it. A hedge's failure does not cut the first attempt short.
func WithHedging(h *hedge.Policy) Option {
	return optionFunc(func(c *config) { c.hedge = h })
}

// WaitWhenOpen makes a call that finds the breaker open (or half-open with
// its probes out) wait for it instead of failing at once: until the probe
// that closes it succeeds (it is woken at once) or, with no probe out yet,
// until the call may be the probe itself. It sends nothing meanwhile.
// Waiting calls go on in the order they came; the probes of a half-open
// breaker are those with the most time left.
//
// It waits only within the time budget: a call whose deadline comes
// before the breaker's next probe fails at once, and one whose deadline
// comes while it waits fails with an error matching both the rejection
// and [retrypolicy.ErrOutOfTime]. The wait is reported as
// [resilience.EventWaitOpen].
//
// The backlog of calls that waited must not reach a dependency that has
// just come back all at once. So the attempts of the calls that waited go
// through an adaptive concurrency limit of the pipeline's own
// (limit.NewAIMD, attempts beyond it queued within their budget, the
// oldest that still has time for an answer first: limit.OldestOnTime),
// which paces the backlog to what the dependency answers, doubling each
// round trip while it keeps up. Calls that never waited are never queued there:
// while a call that waited is not over, their attempts count in that
// limit (past it if need be), so the backlog yields to them; with nothing
// waiting, the limit is not used at all. An attempt admitted once the
// breaker has opened again, as it waited for its turn, is not sent: its
// call waits again. A call whose retries the breaker stopped goes on,
// once let through, with the attempts it had left
// ([retrypolicy.Resume]): the retry policy's MaxAttempts holds over the
// whole call, waits included, and each retry is charged to its
// [retrypolicy.Quota] as it is sent, except a half-open breaker's probe,
// which the breaker bounds (HalfOpenRequests an open timeout): a call let
// through as one sends its one attempt uncharged. Default off: a
// rejected call fails at once.
func WaitWhenOpen() Option {
	return optionFunc(func(c *config) { c.waitOpen = true })
}

// WithTracer reports each call and each of its attempts to t, with their
// contexts, to record them as spans; a panic in t is logged, and changes
// neither the call's outcome nor the breaker's counts, nor does a nil
// context from its StartAttempt (the attempt keeps its own). t is called
// outside the pipeline's locks: a slow StartAttempt holds up its own
// attempt only, and a hedge's, still starting as its call returns, ends
// the call's span once it has started, after the call returned (a
// testing/synctest bubble must outlast it). Default none, at no cost; nil
// means none.
func WithTracer(t resilience.Tracer) Option {
	return optionFunc(func(c *config) { c.tracer = t })
}
