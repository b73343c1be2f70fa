package pipeline

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"time"

	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// state is what the stages inside the retry stage keep of one call: a
// call has one only for hedging or a tracer. Its methods do nothing on a
// nil *state.
type state struct {
	p      *Pipeline
	single bool
	trace  resilience.CallTrace

	mu      sync.Mutex // hedged attempts run at once
	n       int        // attempts started
	lastEnd time.Time  // when the last attempt ended, while tracing
	lastErr error
}

// start numbers a new attempt and describes it for the tracer.
func (s *state) start(hedge bool) resilience.AttemptInfo {
	if s == nil {
		return resilience.AttemptInfo{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	a := resilience.AttemptInfo{Number: s.n, Hedge: hedge}
	if s.trace != nil {
		a.State = s.p.cfg.breaker.State()
		if !hedge && !s.lastEnd.IsZero() {
			a.Delay = time.Since(s.lastEnd)
			if hint, ok := resilience.RetryAfterHint(s.lastErr); ok && s.p.cfg.retry != nil {
				a.RetryAfter = min(hint, s.p.cfg.retry.MaxDelay()) // as the retry used it
			}
		}
	}
	return a
}

// ended records the end of an attempt, for the tracer.
func (s *state) ended(err error) {
	if s == nil || s.trace == nil {
		return
	}
	s.mu.Lock()
	s.lastEnd, s.lastErr = time.Now(), err
	s.mu.Unlock()
}

// errPanicked is what the tracer and the adaptive stages are told of an
// attempt that panicked or called runtime.Goexit.
var errPanicked = errors.New("pipeline: the operation panicked or called runtime.Goexit")

// try runs one attempt of the retry stage: hedged if hedging is set and
// the call may be repeated, else a single attempt.
func try[T any](ctx context.Context, p *Pipeline, op resilience.Operation[T], k *keeper, c call, s *state, guard func() error, mayHedge bool) (T, error) {
	if !p.cfg.perAttempt {
		return timed(ctx, p, op, k)
	}
	pacer := p.pacer(c)
	if mayHedge && !c.single && !c.sequential {
		if d, ok := p.cfg.hedge.After(); ok {
			return hedged(ctx, p, op, k, c, s, guard, d)
		}
	}
	return attempt(ctx, p, op, k, s, false, pacer, nil)
}

// pacer returns the limit that paces the attempts of call c: with
// WaitWhenOpen, the waiters' limit while any call that waited for the
// breaker is not over (so that the backlog, and what comes with it, goes
// no faster than the dependency answers); else nil.
func (p *Pipeline) pacer(c call) *limit.Limiter {
	if p.cfg.waiters != nil && (c.waited || p.cfg.backlog.Load() > 0) {
		return p.cfg.waiters
	}
	return nil
}

// attempt runs op once through the throttle, the concurrency limit, the
// pacer if any, and the attempt timeout, and reports it to the tracer.
// sent, if not nil, is called once the attempt holds its slots, as it is
// sent.
func attempt[T any](ctx context.Context, p *Pipeline, op resilience.Operation[T], k *keeper, s *state, hedge bool, pacer *limit.Limiter, sent func()) (res T, err error) {
	info := s.start(hedge)
	if err := p.cfg.throttle.Admit(); err != nil {
		p.cfg.listener.Emit(resilience.Event{Kind: resilience.EventThrottled, Attempt: info.Number, Err: err})
		return res, err
	}
	if err := p.cfg.limit.Acquire(ctx); err != nil {
		p.cfg.listener.Emit(resilience.Event{Kind: resilience.EventLimited, Attempt: info.Number, Err: err})
		return res, err
	}
	if err := pacer.Acquire(ctx); err != nil {
		p.cfg.limit.Release(context.Canceled) // not sent: nothing learned
		p.cfg.listener.Emit(resilience.Event{Kind: resilience.EventLimited, Attempt: info.Number, Err: err})
		return res, err
	}
	if sent != nil {
		sent()
	}
	var end func(error)
	if s != nil && s.trace != nil {
		ctx, end = s.trace.StartAttempt(ctx, info)
	}
	var start time.Time
	if p.cfg.hedge.Learns() {
		start = time.Now()
	}
	returned := false
	defer func() {
		outcome := err
		switch {
		case !returned:
			outcome = errPanicked
		case err != nil && errors.Is(ctx.Err(), context.Canceled):
			outcome = context.Canceled // abandoned, as a hedge that lost: not the dependency's failure
		}
		p.cfg.limit.Release(outcome)
		pacer.Release(outcome)
		p.cfg.throttle.Done(outcome)
		if end != nil {
			end(outcome)
		}
		s.ended(outcome)
	}()
	res, err = timed(ctx, p, op, k)
	returned = true
	if err == nil && !start.IsZero() {
		p.cfg.hedge.Observe(time.Since(start))
	}
	return res, err
}

// timed runs op once within the attempt timeout, if any.
func timed[T any](ctx context.Context, p *Pipeline, op resilience.Operation[T], k *keeper) (T, error) {
	if p.cfg.attemptTimeout <= 0 {
		return op(ctx)
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.attemptTimeout)
	if k == nil {
		defer cancel()
		return op(ctx)
	}
	prev := k.attempt
	k.attempt = cancel
	if prev != nil {
		// The attempt before this one is over once this one has ended:
		// until then op may still read what it left, such as an error
		// body to drain so that its connection is reused.
		defer prev()
	}
	return op(ctx)
}

// hedged is one attempt of the retry stage with hedges: after delay
// without an answer, another attempt is sent, up to the policy's limit;
// the first success wins. Every attempt runs on a goroutine of its own,
// with its own keeper, so that the winner's contexts outlive the losers'.
func hedged[T any](ctx context.Context, p *Pipeline, op resilience.Operation[T], k *keeper, c call, s *state, guard func() error, delay time.Duration) (T, error) {
	type result struct {
		res      T
		err      error
		keep     *keeper
		panicked any  // what the attempt panicked with
		goexit   bool // the attempt called runtime.Goexit
	}
	extra := p.cfg.hedge.Extra()
	results := make(chan result, extra+1)
	var keepers []*keeper
	first := make(chan struct{}) // closed as the first attempt is sent
	launch := func(hedge bool) {
		var sent func()
		if !hedge {
			sent = func() { close(first) }
		}
		hk := new(keeper)
		actx, cancel := context.WithCancel(ctx)
		hk.budget = cancel
		keepers = append(keepers, hk)
		go func() {
			r := result{keep: hk}
			returned := false
			defer func() {
				if !returned {
					if r.panicked = recover(); r.panicked == nil {
						r.goexit = true
					}
				}
				results <- r
			}()
			r.res, r.err = attempt(actx, p, op, hk, s, hedge, p.pacer(c), sent)
			returned = true
		}()
	}
	dispose := func(r result) {
		if fn, ok := c.discard.(func(T)); ok && r.panicked == nil && !r.goexit {
			fn(r.res)
		}
		r.keep.release()
	}
	// keep hands r's contexts to the call's keeper, if it has one.
	keep := func(r result) {
		if k == nil {
			r.keep.release()
			return
		}
		prev := k.attempt
		k.attempt = r.keep.release
		if prev != nil {
			prev()
		}
	}

	launch(false)
	running, sent := 1, 1
	// The delay runs from when the first attempt is sent, not from a wait
	// for a slot of the concurrency limit.
	timer := time.NewTimer(delay)
	timer.Stop()
	defer timer.Stop()
	started := first
	var last result
	have := false
	for running > 0 {
		select {
		case <-started:
			started = nil
			timer.Reset(delay)
		case r := <-results:
			running--
			if r.panicked != nil || r.goexit {
				abandon(keepers, nil, results, running, dispose)
				if r.goexit {
					runtime.Goexit()
				}
				panic(r.panicked)
			}
			if resilience.Classify(r.err) == resilience.ClassRejected && running > 0 {
				// Refused on our side (throttle, limit): no more hedges, but
				// the attempts out may still answer.
				sent = extra + 1
				dispose(r)
				continue
			}
			retryable := r.err != nil && resilience.Classify(r.err).Retryable()
			if have && retryable && retryAfter(last.err) > retryAfter(r.err) {
				dispose(r) // the dependency's longest hint decides the retry's delay
				continue
			}
			if have {
				dispose(last)
			}
			last, have = r, true
			if !retryable {
				// A success wins; an answer not to retry stops the hedges.
				abandon(keepers, r.keep, results, running, dispose)
				keep(r)
				return r.res, r.err
			}
		case <-timer.C:
			if sent > extra || ctx.Err() != nil || (guard != nil && guard() != nil) || !p.cfg.retry.Quota().Take() {
				continue
			}
			launch(true)
			running++
			sent++
			p.cfg.listener.Emit(resilience.Event{Kind: resilience.EventHedged, Attempt: sent, Delay: delay})
			if sent <= extra {
				timer.Reset(delay)
			}
		}
	}
	keep(last)
	return last.res, last.err
}

// retryAfter returns err's retry-after hint, 0 if none.
func retryAfter(err error) time.Duration {
	d, _ := resilience.RetryAfterHint(err)
	return d
}

// abandon cancels the attempts still running, all but the winner's, and
// disposes of their results as they come, on a goroutine of its own.
func abandon[R any](keepers []*keeper, winner *keeper, results <-chan R, running int, dispose func(R)) {
	if running == 0 {
		return
	}
	for _, hk := range keepers {
		if hk != winner {
			hk.budget() // cancels the attempt's context
		}
	}
	go func() {
		for range running {
			dispose(<-results)
		}
	}()
}
