package pipeline

import (
	"context"
	"runtime"
	"time"

	"github.com/resiliencekit/resiliencekit/resilience"
)

// race is one attempt of the retry stage with hedges: after the hedging
// delay without an answer, another attempt is sent, up to the policy's
// limit; the first success wins and the others are canceled. Every
// attempt runs on a goroutine of its own, with its own keeper, so that the
// winner's contexts outlive the losers'. A race is used by one goroutine,
// the call's; its attempts report on results.
type race[T any] struct {
	c       call[T] // a copy: each attempt runs a copy of it with its own keeper
	extra   int     // most hedges
	results chan outcome[T]
	keepers []*keeper
	first   chan struct{} // closed as the first attempt is sent
	running int           // attempts not yet reported
	sent    int           // attempts sent, hedges included
	last    outcome[T]    // the answer to return if no attempt wins
	have    bool          // last is set
}

// outcome is how one attempt of a race ended.
type outcome[T any] struct {
	res      T
	err      error
	keep     *keeper
	panicked any  // what the attempt panicked with
	goexit   bool // the attempt called runtime.Goexit
}

func newRace[T any](c *call[T]) *race[T] {
	extra := c.p.cfg.hedge.Extra()
	c.p.cfg.hedge.Called()
	return &race[T]{c: *c, extra: extra, results: make(chan outcome[T], extra+1), first: make(chan struct{})}
}

// run runs the race, hedging after delay, and returns the winner's answer,
// or the last failure's (the one with the longest retry-after hint).
func (r *race[T]) run(ctx context.Context, delay time.Duration) (T, error) {
	r.launch(ctx, false)
	r.sent = 1
	// The delay runs from when the first attempt is sent, not from a wait
	// for a slot of the concurrency limit.
	timer := time.NewTimer(delay)
	timer.Stop()
	defer timer.Stop()
	started := r.first
	for r.running > 0 {
		select {
		case <-started:
			started = nil
			timer.Reset(delay)
		case o := <-r.results:
			r.running--
			if r.settle(o) {
				return r.last.res, r.last.err
			}
		case <-timer.C:
			if r.hedge(ctx, delay) && r.sent <= r.extra {
				timer.Reset(delay)
			}
		}
	}
	r.keep(r.last)
	return r.last.res, r.last.err
}

// launch starts an attempt on a goroutine of its own.
func (r *race[T]) launch(ctx context.Context, hedge bool) {
	var sent func()
	if !hedge {
		sent = func() { close(r.first) }
	}
	hk := new(keeper)
	if hedge {
		ctx = context.WithValue(ctx, hedgeKey{}, true)
	}
	actx, cancel := context.WithCancel(ctx)
	hk.budget = cancel
	r.keepers = append(r.keepers, hk)
	a := r.c
	a.k = hk
	results := r.results
	r.running++
	go func() {
		o := outcome[T]{keep: hk}
		returned := false
		defer func() {
			if !returned {
				if o.panicked = recover(); o.panicked == nil {
					o.goexit = true
				}
			}
			results <- o
		}()
		o.res, o.err = a.attempt(actx, hedge, sent)
		returned = true
	}()
}

// hedge sends a hedge, unless the race has sent all it may, the call is
// over, the breaker has opened or the hedging policy's budget is spent;
// it reports whether it did.
func (r *race[T]) hedge(ctx context.Context, delay time.Duration) bool {
	c := &r.c
	if r.sent > r.extra || ctx.Err() != nil || c.b.Check() != nil || !c.p.cfg.hedge.Take() {
		return false
	}
	r.launch(ctx, true)
	r.sent++
	c.p.cfg.listener.Emit(resilience.Event{Kind: resilience.EventHedged, Attempt: r.sent, Delay: delay})
	return true
}

// settle takes the outcome of an attempt, and reports whether it ends the
// race: a success or an answer not to retry, which is then r.last. A panic
// or runtime.Goexit of the attempt goes on in the caller.
func (r *race[T]) settle(o outcome[T]) bool {
	if o.panicked != nil || o.goexit {
		o.keep.release()
		r.abandon(nil)
		if o.goexit {
			runtime.Goexit()
		}
		panic(o.panicked)
	}
	if resilience.Classify(o.err) == resilience.ClassRejected && r.running > 0 {
		// Refused on our side (throttle, limit): no more hedges, but the
		// attempts out may still answer.
		r.sent = r.extra + 1
		r.dispose(o)
		return false
	}
	retryable := o.err != nil && resilience.Classify(o.err).Retryable()
	if r.have && retryable && retryAfter(r.last.err) > retryAfter(o.err) {
		r.dispose(o) // the dependency's longest hint decides the retry's delay
		return false
	}
	if r.have {
		r.dispose(r.last)
	}
	r.last, r.have = o, true
	if retryable {
		return false
	}
	r.abandon(o.keep)
	r.keep(o)
	return true
}

// dispose gives the result of an attempt that is not returned to the
// call's Discard function, if any, and cancels its contexts.
func (r *race[T]) dispose(o outcome[T]) {
	if fn, ok := r.c.opts.discard.(func(T)); ok && o.panicked == nil && !o.goexit {
		fn(o.res)
	}
	o.keep.release()
}

// keep hands o's contexts to the call's keeper, if it has one, else
// cancels them.
func (r *race[T]) keep(o outcome[T]) {
	k := r.c.k
	if k == nil {
		o.keep.release()
		return
	}
	prev := k.attempt
	k.attempt = o.keep.release
	if prev != nil {
		prev()
	}
}

// abandon cancels the attempts still running, all but the winner's, and
// disposes of their results as they come, on a goroutine of its own.
func (r *race[T]) abandon(winner *keeper) {
	if r.running == 0 {
		return
	}
	for _, hk := range r.keepers {
		if hk != winner {
			hk.budget() // cancels the attempt's context
		}
	}
	go func(n int) {
		for range n {
			r.dispose(<-r.results)
		}
	}(r.running)
}

type hedgeKey struct{}

// IsHedge reports whether ctx is the context of a hedge: a twin of the
// attempt before it, sent while that one still ran ([WithHedging]). An
// integration that numbers its attempts on the wire, as httpclient does in
// retrysignal's header, gives a hedge the number of its twin, marked as a
// hedge, not a number of its own past the most attempts.
func IsHedge(ctx context.Context) bool {
	hedge, _ := ctx.Value(hedgeKey{}).(bool)
	return hedge
}

// retryAfter returns err's retry-after hint, 0 if none.
func retryAfter(err error) time.Duration {
	d, _ := resilience.RetryAfterHint(err)
	return d
}
