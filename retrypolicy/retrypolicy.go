// Package retrypolicy retries an operation with capped exponential backoff
// and jitter, within a time budget.
//
//	policy := retrypolicy.New(retrypolicy.MaxAttempts(3)) // full jitter, 100 ms base, 10 s cap
//	stock, err := retrypolicy.Do(ctx, policy, func(ctx context.Context) (int, error) {
//		return inventory.Stock(ctx, sku)
//	})
//
// Most programs use a policy in a pipeline (pipeline.WithRetry), beside a
// breaker and a time budget.
//
// Retry n (n = 0 for the first retry) waits a delay drawn below
// cap(n) = min(BaseDelay*2^n, MaxDelay), except with [Decorrelated] jitter. How it is drawn is the [JitterMode]:
// [Full] (the default) draws from [0, cap]; [Equal] from [cap/2, cap];
// [Decorrelated] from [BaseDelay, 3*previous delay], capped at MaxDelay; and
// [None] waits exactly cap. Spreading the delays keeps many clients that
// failed together from retrying together, which is what turns a short outage
// into a retry storm.
//
// Only transient errors are retried (see [resilience.Classify]); a permanent
// one returns at once. A dependency's retry-after hint
// ([resilience.RetryAfter]) is waited for, up to MaxDelay. The time budget
// is the context's deadline: a delay that would end past it is not slept,
// and the call returns the last error at once. There is no option for it:
// set a deadline on the context, or let a pipeline's time budget set it.
//
// A [Quota] shared by every call to one dependency caps how many retries
// they may add (the "retry budget" of Google's SRE book).
//
// The delays come from github.com/cenkalti/backoff/v4's ExponentialBackOff
// (without its own randomization) decorated with the jitter; none of its
// types appear in this API. The loop is this package's own, since it passes
// the context to each attempt, looks ahead at the budget and can be stopped
// between attempts by a guard such as a circuit breaker.
package retrypolicy

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"math"
	"time"

	"github.com/resiliencekit/resiliencekit/internal/classify"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// Sentinel reasons for giving up, matched with [errors.Is] on the error that
// [Do] returns.
var (
	// ErrMaxAttempts means every allowed attempt failed.
	ErrMaxAttempts = errors.New("max attempts reached")
	// ErrNotRetryable means the last error was not worth retrying.
	ErrNotRetryable = errors.New("error not retryable")
	// ErrOutOfTime means the time budget (the context's deadline) ran out,
	// or would have before the next attempt. It also matches
	// [context.DeadlineExceeded].
	ErrOutOfTime error = outOfTime{}
)

type outOfTime struct{}

func (outOfTime) Error() string { return "time budget exhausted" }

func (outOfTime) Is(target error) bool { return target == context.DeadlineExceeded }

// Error is what [Do] returns when it gives up. It wraps both the reason and
// the last attempt's error, so [errors.Is] and [errors.As] see both.
type Error struct {
	// Attempts is how many times the operation was tried: in a pipeline,
	// an attempt that the pipeline's own gates (throttle, concurrency
	// limit) refused before it was sent counts.
	Attempts int
	// Reason is why the loop stopped: [ErrMaxAttempts], [ErrNotRetryable],
	// [ErrOutOfTime], [ErrQuotaExhausted], [context.Canceled], or a
	// guard's error.
	Reason error
	// Last is the last attempt's error; nil when the operation never ran.
	Last error
	// OwnBudget says, with Reason [ErrOutOfTime], that the time that ran
	// out, or would have before another attempt, was a pipeline's own
	// time budget (pipeline.WithTimeBudget), which came before its
	// caller's deadline: the caller may have time to try again. False
	// when it was the deadline of the caller's context.
	OwnBudget bool

	guarded bool  // the guard stopped the loop: Resume may go on with it
	sent    error // see Answer
}

// Error returns a message with the attempt count, the reason and the last
// error.
func (e *Error) Error() string {
	noun := "attempts"
	if e.Attempts == 1 {
		noun = "attempt"
	}
	if e.Last == nil {
		return fmt.Sprintf("retry: gave up after %d %s (%v)", e.Attempts, noun, e.Reason)
	}
	return fmt.Sprintf("retry: gave up after %d %s (%v): %v", e.Attempts, noun, e.Reason, e.Last)
}

// Unwrap returns the reason and the last error.
func (e *Error) Unwrap() []error {
	if e.Last == nil {
		return []error{e.Reason}
	}
	return []error{e.Reason, e.Last}
}

// answerIn returns the answer in err's tree (of a retry loop's error, or
// of another error that has one, such as a hedged race's that its
// caller's cancellation ended), nil if none.
func answerIn(err error) error {
	var a interface{ Answer() error }
	if errors.As(err, &a) {
		return a.Answer()
	}
	return nil
}

// answerOf returns the dependency's last answer in a run of a loop that
// its caller or a gate stopped as an attempt ended with err, which is not
// one: the answer of a loop nested in the operation, or else, if the
// attempt was a retry of this run, prev, the attempt before's.
func answerOf(err error, prev error, retry bool) error {
	if a, _ := classify.Ask(answerIn, err); a != nil {
		return a
	}
	if retry {
		return prev
	}
	return nil
}

// Answer returns, for a loop that a pipeline's gate (the throttle, the
// concurrency limit), its caller's cancellation or its deadline stopped
// after the dependency answered an attempt, the error of the last attempt
// answered in the same run of the loop: the attempt before the retry the
// gate refused or the cancellation or the deadline ended, or the attempt
// whose backoff was canceled, or else the answer of a loop nested in the
// operation that stopped so; nil otherwise. The call's
// class is the refusal's (rejected: not retried by a layer above) or the
// cancellation's, but a breaker (package breaker) counts the call by this
// answer: a failure if the dependency failed it, whatever then stopped
// the retries, and otherwise neither a failure nor a success.
func (e *Error) Answer() error { return e.sent }

// ResilienceClass returns the class of the reason when it has one of its
// own (the caller's cancellation, or a guard's error such as an open
// breaker's), so that a loop stopped by a guard carries the same class as a
// call the guard rejected up front; otherwise the class of the last error.
func (e *Error) ResilienceClass() resilience.Class {
	if e.Last == nil && e.Attempts == 0 && errors.Is(e.Reason, context.DeadlineExceeded) {
		return resilience.ClassRejected // out of time before anything was sent: not the dependency's doing
	}
	if errors.Is(e.Reason, context.Canceled) || e.Last == nil {
		return resilience.Classify(e.Reason)
	}
	if c, ok := resilience.ClassOf(e.Reason); ok {
		return c
	}
	return resilience.Classify(e.Last)
}

// Policy is an immutable retry configuration. It is safe for concurrent use
// by any number of calls; each call keeps its own backoff state. A nil
// *Policy and the zero Policy behave as New().
type Policy struct {
	cfg config
}

var defaultPolicy = New()

// New returns a Policy configured by opts on top of the defaults: 4
// attempts, 100 ms base delay, 10 s max delay, full jitter, no time budget
// beyond the context's, transient errors retried.
func New(opts ...Option) *Policy {
	cfg := defaults()
	for _, o := range opts {
		if o != nil {
			o.apply(&cfg)
		}
	}
	return &Policy{cfg: cfg}
}

// With returns a copy of p with opts applied on top of its configuration.
func (p *Policy) With(opts ...Option) *Policy {
	cfg := *p.config()
	for _, o := range opts {
		if o != nil {
			o.apply(&cfg)
		}
	}
	return &Policy{cfg: cfg}
}

// Delays returns the delays one call would wait before its retries, in
// order, freshly drawn: an endless sequence, without MaxAttempts or the
// budget. It is for simulations, plots and tests.
func (p *Policy) Delays() iter.Seq[time.Duration] {
	cfg := p.config()
	return func(yield func(time.Duration) bool) {
		d := cfg.newDelays()
		for yield(d.NextBackOff()) {
		}
	}
}

// MaxAttempts returns the configured attempt limit; 0 means unlimited.
func (p *Policy) MaxAttempts() int { return p.config().maxAttempts }

// WouldRetry reports whether p retries a first attempt that failed with
// err: it allows more than one attempt, and err is retried by its class
// or by [RetryIf]. A pipeline asks it for a call it makes once (a POST
// without an idempotency key), to report what it did not retry.
func (p *Policy) WouldRetry(err error) bool {
	c := p.config()
	return c.maxAttempts != 1 && c.retryable(err)
}

// MaxDelay returns the longest delay p waits before a retry, a
// dependency's retry-after hint included.
func (p *Policy) MaxDelay() time.Duration { return p.config().maxDelay }

// Quota returns the policy's [Quota], nil if none.
func (p *Policy) Quota() *Quota { return p.config().quota }

// config returns p's configuration: the defaults for a nil or zero Policy
// (a zero one has no sleep function; New always sets one).
func (p *Policy) config() *config {
	if p == nil || p.cfg.sleep == nil {
		return &defaultPolicy.cfg
	}
	return &p.cfg
}

// Do runs op until it succeeds, returns an error that is not retried, runs
// out of attempts or runs out of time (ctx's deadline). Each attempt gets
// ctx. On failure it returns the last attempt's result and an [*Error]. A
// done ctx stops the loop at once, also mid-sleep.
func Do[T any](ctx context.Context, p *Policy, op resilience.Operation[T]) (T, error) {
	return DoGuarded(ctx, p, nil, op)
}

// DoGuarded is [Do] with a guard called before each retry is scheduled and
// again before it runs (never before the first attempt). A non-nil error
// from guard stops the loop at once; it becomes the [Error.Reason]. A
// circuit breaker's check is the typical guard: a loop stops retrying as
// soon as the breaker has opened. An attempt that fails with an error of
// class [resilience.ClassRejected] matching (errors.Is) the guard's error
// as it is asked then was refused by what the guard guards before it was
// sent (a breaker that opened as the attempt waited for a slot): it is
// not counted as made, nor reported again, and the loop stops as the
// guard would have stopped it.
func DoGuarded[T any](ctx context.Context, p *Policy, guard func() error, op resilience.Operation[T]) (T, error) {
	cfg := p.config()
	if ctx.Err() != nil {
		var zero T
		return zero, cfg.giveUp(0, stopReason(ctx), nil)
	}
	counted := int64(notCounted)
	if cfg.quota != nil {
		counted = cfg.quota.deposit()
	}
	return loop(ctx, cfg, guard, op, 0, nil, notCounted, counted)
}

// Resume goes on with a loop of [DoGuarded] that its guard stopped, from
// the retry the guard refused, once what stopped it is over (a circuit
// breaker has let the call through again; waiting for that is the
// caller's): stopped is the [*Error] that DoGuarded, or an earlier
// Resume, returned, with p, the policy that ran it. The attempts already
// made count towards MaxAttempts, and the next is numbered after them;
// the retry is charged to the [Quota] once, as the refused one would have
// been, and its delays start again from the first. A loop that its guard
// stopped keeps no charge, even one stopped after its delay or as its
// retry was refused, the retry charged already: it gives the charge back,
// so that a loop that is not resumed has spent nothing. With an error
// that is not a guard's stop (nil among them), Resume is DoGuarded.
func Resume[T any](ctx context.Context, p *Policy, guard func() error, stopped error, op resilience.Operation[T]) (T, error) {
	e, ok := stopped.(*Error)
	if !ok || !e.guarded {
		return DoGuarded(ctx, p, guard, op)
	}
	var zero T
	cfg := p.config()
	switch {
	case ctx.Err() != nil:
		return zero, cfg.giveUp(e.Attempts, stopReason(ctx), e.Last)
	case e.Attempts >= math.MaxInt-1 || cfg.maxAttempts > 0 && e.Attempts >= cfg.maxAttempts:
		return zero, cfg.giveUp(e.Attempts, ErrMaxAttempts, e.Last)
	case e.Attempts == 0: // stopped before its first attempt was sent: no retry
		return loop(ctx, cfg, guard, op, 0, nil, notCounted, notCounted)
	}
	charge := int64(notCounted)
	if cfg.quota != nil {
		var ok bool
		if charge, ok = cfg.quota.take(nil); !ok {
			return zero, cfg.giveUp(e.Attempts, ErrQuotaExhausted, e.Last)
		}
	}
	cfg.listener.Emit(resilience.Event{Kind: resilience.EventRetry, Attempt: e.Attempts, Err: e.Last})
	return loop(ctx, cfg, guard, op, e.Attempts, e.Last, charge, notCounted)
}

// loop runs op from attempt made+1 until it succeeds or the loop stops;
// last is attempt made's error, charge the quota's bucket that attempt
// made+1, a retry, was charged to (notCounted if none), and counted the
// bucket the quota counted the call in (notCounted if none, or not to be
// checked).
func loop[T any](ctx context.Context, cfg *config, guard func() error, op resilience.Operation[T], made int, last error, charge, counted int64) (T, error) {
	attemptEvents := cfg.listener.Wants(resilience.EventAttempt)
	var delays delaySource
	running := 0 // the attempt op runs, 0 once it returned
	owed, owedErr := 0, error(nil)
	defer func() {
		if running != 0 { // op panicked or called runtime.Goexit: a failed attempt for the counts
			cfg.listener.Count(running, errPanicked)
		}
		if owed != 0 { // not retried: as it ended
			cfg.listener.Count(owed, owedErr)
		}
	}()
	for attempt := made + 1; ; attempt++ {
		running = attempt
		res, err := op(ctx)
		running = 0
		var class resilience.Class
		classified := false
		if err != nil {
			var sent bool
			if err, sent = classify.Sent(err); !sent { // a pipeline's gate refused it: the retry charged reached no dependency (review160)
				cfg.giveBack(charge)
				charge = notCounted
			}
			err = resilience.Acyclic(err) // one that wraps itself would hang errors.Is below
			class, classified = classify.Safely(err)
		}
		rejected := classified && class == resilience.ClassRejected // refused on this side: not sent
		if rejected && guard != nil {
			if gerr := guard(); gerr != nil && errors.Is(err, gerr) { // refused as the guard would have
				cfg.giveBack(charge)
				return res, &Error{Attempts: attempt - 1, Reason: gerr, Last: last, guarded: true}
			}
		}
		prev := last
		last, charge = err, notCounted
		canceled := classified && class == resilience.ClassCanceled
		if canceled && ctx.Err() == nil { // the operation's own cancellation: counted once it is known whether it is retried (RetryIf)
			owed, owedErr = attempt, err
		} else {
			cfg.listener.Count(attempt, err)
		}
		if attemptEvents {
			cfg.listener.Wanted(resilience.Event{Kind: resilience.EventAttempt, Attempt: attempt, Err: err})
		}
		if err == nil {
			return res, nil
		}
		if ctx.Err() != nil { // whatever err is (a cause's, say), not the dependency's answer
			return res, cfg.giveUpAt(attempt, stopReason(ctx), err, answerOf(err, prev, attempt > made+1))
		}
		var answer error          // what a breaker counts the call by if it stops here, where err is no answer
		if rejected || canceled { // a gate's refusal, the operation's own cancellation
			answer = answerOf(err, prev, attempt > made+1)
		}
		if !cfg.retryableAs(err, class, classified) {
			return res, cfg.giveUpAt(attempt, ErrNotRetryable, err, answer)
		}
		if cfg.maxAttempts > 0 && attempt >= cfg.maxAttempts {
			return res, cfg.giveUpAt(attempt, ErrMaxAttempts, err, answer)
		}
		if delays == nil {
			delays = cfg.newDelays()
		}
		delay := delays.NextBackOff()
		if hint, ok := classify.RetryAfter(err); ok && hint > delay {
			delay = min(hint, cfg.maxDelay)
		}
		if deadline, ok := ctx.Deadline(); ok && !time.Now().Add(delay).Before(deadline) {
			if !time.Now().Before(deadline) { // passed: the attempt ended at it (ctx has yet to hear), no answer
				answer = answerOf(err, prev, attempt > made+1)
			}
			return res, cfg.giveUpAt(attempt, ErrOutOfTime, err, answer)
		}
		if guard != nil {
			if gerr := guard(); gerr != nil {
				owed = cfg.retried(owed)
				return res, cfg.stopped(attempt, gerr, err)
			}
		}
		if cfg.quota != nil {
			var ok bool
			if charge, ok = cfg.quota.take(&counted); !ok {
				return res, cfg.giveUpAt(attempt, ErrQuotaExhausted, err, answer)
			}
		}
		cfg.listener.Emit(resilience.Event{Kind: resilience.EventRetry, Attempt: attempt, Delay: delay, Err: err})
		if serr := cfg.backOff(ctx, delay, charge); serr != nil {
			reason := serr
			if ctx.Err() != nil {
				reason = stopReason(ctx)
			}
			if ctx.Err() != nil && !canceled {
				answer = err // failed, and retryable: an answer
			}
			return res, cfg.giveUpAt(attempt, reason, err, answer)
		}
		if guard != nil {
			if gerr := guard(); gerr != nil {
				cfg.giveBack(charge)
				owed = cfg.retried(owed)
				return res, cfg.stopped(attempt, gerr, err)
			}
		}
		owed = cfg.retried(owed)
	}
}

// retried counts attempt owed, if not 0, one of class canceled that the
// loop retries, or would but for its guard, as a failed attempt: the counts
// take a retry to follow one, as a 503's would. It returns 0.
func (c *config) retried(owed int) int {
	if owed != 0 {
		c.listener.Count(owed, errRetried)
	}
	return 0
}

// giveUpAt is giveUp, with the answer a breaker counts the call by (see
// [Error.Answer]).
func (c *config) giveUpAt(attempt int, reason, last, answer error) *Error {
	e := c.giveUp(attempt, reason, last)
	e.sent = answer
	return e
}

// backOff sleeps for d before a retry charged to the quota in bucket, and
// gives the retry back if it is not made: the sleep failed (its context
// ended), panicked or called runtime.Goexit.
func (c *config) backOff(ctx context.Context, d time.Duration, bucket int64) error {
	if c.quota == nil {
		return c.sleep(ctx, d)
	}
	slept := false
	defer func() {
		if !slept {
			c.giveBack(bucket)
		}
	}()
	err := c.sleep(ctx, d)
	slept = err == nil
	return err
}

// giveBack gives the quota back a retry charged to its bucket charge and
// not sent; nothing if none was charged (notCounted).
func (c *config) giveBack(charge int64) {
	if c.quota != nil && charge != notCounted {
		c.quota.refund(charge)
	}
}

// giveUp returns the error for a loop that stops after attempt, and
// reports why.
func (c *config) giveUp(attempt int, reason, last error) *Error {
	if c.listener != nil {
		var kind resilience.EventKind
		switch {
		case reason == ErrMaxAttempts:
			kind = resilience.EventRetriesExhausted
		case reason == ErrQuotaExhausted:
			kind = resilience.EventQuotaExhausted
		case errors.Is(reason, context.DeadlineExceeded):
			kind = resilience.EventTimeBudgetExceeded
		case reason == ErrNotRetryable && classify.Holds(resilience.IsUnrepeatable, last):
			kind = resilience.EventNotRetried
		}
		if kind != 0 {
			c.listener.Emit(resilience.Event{Kind: kind, Attempt: attempt, Err: last})
		}
	}
	return &Error{Attempts: attempt, Reason: reason, Last: last}
}

// stopped returns the error for a loop that a guard stopped after
// attempt, and reports the rejection.
func (c *config) stopped(attempt int, guardErr, last error) *Error {
	c.listener.Emit(resilience.Event{Kind: resilience.EventRejected, Attempt: attempt, Err: guardErr})
	return &Error{Attempts: attempt, Reason: guardErr, Last: last, guarded: true}
}

// errPanicked is what the counts of a listener learn of an attempt whose
// operation panicked or called runtime.Goexit.
var errPanicked = errors.New("retrypolicy: the operation panicked or called runtime.Goexit")

// errRetried is what the counts of a listener learn of an attempt of
// class canceled that is retried (see config.retried).
var errRetried = errors.New("retrypolicy: a canceled attempt, retried")

// stopReason says why a done ctx stopped the loop: out of time, or the
// caller's cancellation.
func stopReason(ctx context.Context) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return ErrOutOfTime
	}
	return ctx.Err()
}

// sleep waits for d or until ctx is done, whichever is first.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
