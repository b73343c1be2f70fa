package retrypolicy

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/resiliencekit/resiliencekit/internal/classify"
	"github.com/resiliencekit/resiliencekit/internal/safe"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// Option configures a [Policy].
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	maxAttempts int
	baseDelay   time.Duration
	maxDelay    time.Duration
	jitter      JitterMode
	retryIf     func(error) bool
	sleep       func(ctx context.Context, d time.Duration) error
	quota       *Quota
	listener    *safe.Listener
}

func defaults() config {
	return config{
		maxAttempts: 4,
		baseDelay:   100 * time.Millisecond,
		maxDelay:    10 * time.Second,
		jitter:      Full,
		sleep:       sleep,
	}
}

// backoffPermanent matches any *backoff.PermanentError with errors.Is.
var backoffPermanent = &backoff.PermanentError{}

// retryable reports whether err is retried; an error whose methods panic
// as it is classified is left to RetryIf, and by default not retried.
func (c *config) retryable(err error) bool {
	class, ok := classify.Safely(err)
	return c.retryableAs(err, class, ok)
}

// retryableAs is retryable, err's class being class (ok false if its
// methods panicked as it was classified).
func (c *config) retryableAs(err error, class resilience.Class, ok bool) bool {
	switch {
	case ok && class == resilience.ClassRejected:
		return false
	case c.retryIf != nil:
		return c.retryIf(err)
	}
	return ok && class.Retryable() && !errors.Is(err, backoffPermanent)
}

// MaxAttempts sets how many times an operation runs at most, the first
// attempt included. Default 4; 0 means no limit but the time budget. It
// panics if n is negative.
func MaxAttempts(n int) Option {
	if n < 0 {
		panic(fmt.Sprintf("retrypolicy: MaxAttempts(%d): n must be 0 (no limit) or more", n))
	}
	return optionFunc(func(c *config) { c.maxAttempts = n })
}

// BaseDelay sets the scale of the delays. With Full and Equal jitter it is
// the cap of the first retry's delay, doubled for each later retry up to
// MaxDelay (full jitter's first delay is drawn from [0, BaseDelay]). With
// Decorrelated jitter it is the least delay of any retry, and the first
// delay is drawn from [BaseDelay, 3*BaseDelay] (100 to 300 ms by default).
// Default 100 ms; 0 means retries run back to back. It panics if d is
// negative.
func BaseDelay(d time.Duration) Option {
	if d < 0 {
		panic(fmt.Sprintf("retrypolicy: BaseDelay(%v): d must be 0 or more", d))
	}
	return optionFunc(func(c *config) { c.baseDelay = d })
}

// MaxDelay sets the largest delay between two attempts, retry-after hints
// included; any value up to math.MaxInt64 works. Default 10 s. It panics
// if d is not positive (use BaseDelay(0) for back-to-back retries).
func MaxDelay(d time.Duration) Option {
	if d <= 0 {
		panic(fmt.Sprintf("retrypolicy: MaxDelay(%v): d must be more than 0", d))
	}
	return optionFunc(func(c *config) { c.maxDelay = d })
}

// Jitter sets how each delay is drawn below its cap. Default [Full]. It
// panics for a mode that is not one of the constants.
func Jitter(m JitterMode) Option {
	if m > None {
		panic(fmt.Sprintf("retrypolicy: Jitter(%d): unknown mode", m))
	}
	return optionFunc(func(c *config) { c.jitter = m })
}

// RetryIf replaces the test for whether an error is retried. Default: its
// [resilience.Class] is transient, and it is not marked with
// backoff/v4's Permanent. A done context stops the loop whatever fn
// says, and an error of class [resilience.ClassRejected] is not retried
// whatever fn says: the attempt was refused before it was sent (an open
// breaker, a full concurrency limit, the throttle, the caller's own bad
// request), and a retry, charged to the [Quota], would most often be
// refused again at once.
func RetryIf(fn func(err error) bool) Option {
	return optionFunc(func(c *config) { c.retryIf = fn })
}

// WithSleep replaces how the loop waits between attempts. fn must return
// ctx.Err() if ctx ends first; a non-nil error stops the loop. A test can
// record each delay and return at once. Default: a timer raced against ctx;
// nil keeps it.
func WithSleep(fn func(ctx context.Context, d time.Duration) error) Option {
	return optionFunc(func(c *config) {
		if fn != nil {
			c.sleep = fn
		}
	})
}

// WithQuota makes each call count against q and each retry take one from
// it; a call finding q spent stops retrying with [ErrQuotaExhausted]. Give
// every policy calling one dependency the same Quota. Default none: retries
// are limited only by [MaxAttempts] and the time budget; nil means none.
func WithQuota(q *Quota) Option {
	return optionFunc(func(c *config) { c.quota = q })
}

// WithListener reports each attempt, scheduled retry and reason for giving
// up to l, after any listener set before. Default none, at no cost.
func WithListener(l resilience.Listener) Option {
	return optionFunc(func(c *config) { c.listener = safe.New("", c.listener, l) })
}
