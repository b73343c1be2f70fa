// Package pipeline composes a time budget, a circuit breaker and a retry
// policy around calls to one dependency.
//
// The stages always run in this order, outermost first:
//
//	time budget -> breaker -> retry -> attempt timeout -> operation
//
// The budget caps the whole call, retries and delays included, and the
// operation's context carries its deadline, so the next hop can see how
// much time is left. The breaker comes before the retry: when it is open the
// operation is not called at all, and it records one outcome per call, so
// retries that absorb a short blip do not trip it. Between attempts the
// retry stage asks the breaker again and stops at once if another call
// opened it, so a dependency that dies is not hammered by every in-flight
// retry loop. A call let through a half-open breaker is a probe and makes a
// single attempt.
package pipeline

import (
	"context"
	"sync"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// Pipeline runs operations returning T through its stages. It is immutable
// and safe for concurrent use; several pipelines, of any result types, may
// share one breaker.
type Pipeline[T any] struct {
	cfg config
}

// New returns a Pipeline with the stages that opts configure. Without
// options it runs the operation once, as it is.
func New[T any](opts ...Option) *Pipeline[T] {
	var cfg config
	for _, o := range opts {
		o.apply(&cfg)
	}
	if cfg.name == "" && cfg.breaker != nil {
		cfg.name = cfg.breaker.Name()
	}
	cfg.listener = resilience.Named(cfg.listener, cfg.name)
	if cfg.retry != nil && (cfg.retryBudget != nil || cfg.listener != nil) {
		var extra []retrypolicy.Option
		if cfg.retryBudget != nil {
			extra = append(extra, retrypolicy.WithBudget(cfg.retryBudget))
		}
		if cfg.listener != nil {
			extra = append(extra, retrypolicy.WithListener(cfg.listener))
		}
		cfg.retry = cfg.retry.With(extra...)
	}
	return &Pipeline[T]{cfg: cfg}
}

// Execute runs op through the stages and returns its result. Errors keep
// their causes for [errors.Is] and [errors.As]: a rejection matches
// [breaker.ErrOpen] or [breaker.ErrTooManyRequests], a retry that gave up is
// a [*retrypolicy.Error], and a spent budget matches
// [context.DeadlineExceeded].
func (p *Pipeline[T]) Execute(ctx context.Context, op resilience.Operation[T]) (T, error) {
	return p.run(ctx, op, nil)
}

// ExecuteStream is [Pipeline.Execute] for a result that is still being
// read after op returns, such as an HTTP response's body: on success the
// contexts of the time budget and of the successful attempt stay alive
// until release is called, which the caller must do once it is done with
// the result. On error release is a no-op. release may be called more than
// once.
func (p *Pipeline[T]) ExecuteStream(ctx context.Context, op resilience.Operation[T]) (res T, release func(), err error) {
	var kept keeper
	res, err = p.run(ctx, op, &kept)
	if err != nil {
		kept.release()
		return res, func() {}, err
	}
	return res, sync.OnceFunc(kept.release), nil
}

// keeper holds the cancel functions of contexts that a streamed result
// still needs. A nil keeper keeps nothing.
type keeper struct {
	cancels []context.CancelFunc
}

// done cancels c at once, unless the call succeeded and k keeps it.
func (k *keeper) done(c context.CancelFunc, err error) {
	if k == nil || err != nil {
		c()
		return
	}
	k.cancels = append(k.cancels, c)
}

func (k *keeper) release() {
	for _, c := range k.cancels {
		c()
	}
}

func (p *Pipeline[T]) run(ctx context.Context, op resilience.Operation[T], k *keeper) (T, error) {
	if l := p.cfg.listener; l != nil {
		start := time.Now()
		res, err := p.execute(ctx, op, k)
		l.OnEvent(resilience.Event{Kind: resilience.EventCallDone, Duration: time.Since(start), Err: err})
		return res, err
	}
	return p.execute(ctx, op, k)
}

func (p *Pipeline[T]) execute(ctx context.Context, op resilience.Operation[T], k *keeper) (res T, err error) {
	if p.cfg.budget > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.cfg.budget)
		defer func() { k.done(cancel, err) }()
	}
	b := p.cfg.breaker
	if b == nil {
		return p.retry(ctx, nil, op, k)
	}
	err = b.Execute(ctx, func(ctx context.Context) error {
		var err error
		res, err = p.retry(ctx, b, op, k)
		return err
	})
	return res, err
}

// retry runs the retry stage; b, if set, guards each retry, and a call
// admitted while b is not closed is a probe that makes one attempt.
func (p *Pipeline[T]) retry(ctx context.Context, b *breaker.Breaker, op resilience.Operation[T], k *keeper) (T, error) {
	if p.cfg.retry == nil || (b != nil && b.Check() != nil) {
		return p.single(ctx, op, k)
	}
	var guard func() error
	if b != nil {
		guard = b.Check
	}
	if p.cfg.attemptTimeout <= 0 {
		return retrypolicy.DoGuarded(ctx, p.cfg.retry, guard, op)
	}
	return retrypolicy.DoGuarded(ctx, p.cfg.retry, guard, func(ctx context.Context) (T, error) {
		return p.attempt(ctx, op, k)
	})
}

// single runs the only attempt of a call without a retry stage.
func (p *Pipeline[T]) single(ctx context.Context, op resilience.Operation[T], k *keeper) (T, error) {
	res, err := p.attempt(ctx, op, k)
	if p.cfg.listener != nil {
		p.cfg.listener.OnEvent(resilience.Event{Kind: resilience.EventAttempt, Attempt: 1, Err: err})
	}
	return res, err
}

// attempt runs op once within the attempt timeout, if any.
func (p *Pipeline[T]) attempt(ctx context.Context, op resilience.Operation[T], k *keeper) (T, error) {
	if p.cfg.attemptTimeout <= 0 {
		return op(ctx)
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.attemptTimeout)
	res, err := op(ctx)
	k.done(cancel, err)
	return res, err
}

// Option configures a [Pipeline]. Options are not tied to a result type.
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	breaker        *breaker.Breaker
	retry          *retrypolicy.Policy
	budget         time.Duration
	attemptTimeout time.Duration
	retryBudget    *retrypolicy.Budget
	name           string
	listener       resilience.Listener
}

// WithBreaker guards calls with b. Default none.
func WithBreaker(b *breaker.Breaker) Option {
	return optionFunc(func(c *config) { c.breaker = b })
}

// WithRetry retries failed attempts by policy p. Default none: one attempt.
func WithRetry(p *retrypolicy.Policy) Option {
	return optionFunc(func(c *config) { c.retry = p })
}

// WithTimeBudget caps each call, all attempts and delays included, at d;
// the operation's context carries the deadline. Default none (only the
// caller's context's deadline); d <= 0 means none.
func WithTimeBudget(d time.Duration) Option {
	return optionFunc(func(c *config) { c.budget = max(d, 0) })
}

// WithAttemptTimeout caps each single attempt at d, within the budget; an
// attempt that times out is a transient failure and may be retried. Default
// none; d <= 0 means none.
func WithAttemptTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.attemptTimeout = max(d, 0) })
}

// WithRetryBudget caps the retries of the retry stage by b, shared with
// every other pipeline or policy calling the same dependency; see
// [retrypolicy.Budget]. Default none.
func WithRetryBudget(b *retrypolicy.Budget) Option {
	return optionFunc(func(c *config) { c.retryBudget = b })
}

// WithName names the dependency in events. Default the breaker's name.
func WithName(name string) Option {
	return optionFunc(func(c *config) { c.name = name })
}

// WithListener reports the end of every call, each attempt, each
// scheduled retry and why a call gave up to l, named by [WithName]. Give
// the same listener to the breaker ([breaker.WithListener]) for its state
// changes and rejections. Default none, at no cost.
func WithListener(l resilience.Listener) Option {
	return optionFunc(func(c *config) { c.listener = resilience.Listeners(c.listener, l) })
}
