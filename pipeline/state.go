package pipeline

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/resiliencekit/resiliencekit/internal/classify"
	"github.com/resiliencekit/resiliencekit/internal/monotime"
	"github.com/resiliencekit/resiliencekit/internal/safe"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// state is what the stages inside the retry stage keep of one call: a
// call has one only for hedging or a tracer. Its methods do nothing on a
// nil *state.
type state struct {
	p     *Pipeline
	trace resilience.CallTrace

	n       atomic.Int32     // attempts started
	mu      sync.Mutex       // hedged attempts run at once: for the tracer's fields
	over    bool             // the call's span has ended: no attempt's starts
	hasEnd  bool             // an attempt ended, while tracing: lastEnd is set
	decided bool             // a race's answer is lastErr, until the next attempt not a hedge starts
	lastEnd monotime.Reading // when the last attempt ended, while tracing
	lastErr error
}

// start numbers a new attempt and describes it for the tracer.
func (s *state) start(hedge bool) resilience.AttemptInfo {
	if s == nil {
		return resilience.AttemptInfo{}
	}
	a := resilience.AttemptInfo{Number: int(s.n.Add(1)), Hedge: hedge}
	if s.trace == nil {
		return a
	}
	a.State = s.p.cfg.breaker.State()
	s.mu.Lock()
	defer s.mu.Unlock()
	if !hedge {
		s.decided = false
	}
	if !hedge && s.hasEnd {
		a.Delay = monotime.Since(s.lastEnd)
		if hint, ok := classify.RetryAfter(s.lastErr); ok && s.p.cfg.retry != nil {
			a.RetryAfter = min(hint, s.p.cfg.retry.MaxDelay()) // as the retry used it
		}
	}
	return a
}

// span starts an attempt's span, unless the call's has ended (a hedge
// admitted as its call returned, which is then not sent): under s.mu, as
// end marks the call over, so that every attempt's span starts before the
// call's ends.
func (s *state) span(ctx context.Context, info resilience.AttemptInfo) (context.Context, func(error), bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.over {
		return ctx, nil, false
	}
	ctx, end := safe.StartAttempt(s.trace, ctx, info)
	return ctx, end, true
}

// end ends the call's span, once no attempt's span is starting; none
// starts after it.
func (s *state) end(err error) {
	s.mu.Lock()
	s.over = true
	s.mu.Unlock()
	safe.EndCall(s.trace, err)
}

// ended records the end of an attempt, for the tracer; not that of a
// hedge that ends after its race was decided (raced).
func (s *state) ended(err error) {
	if s == nil || s.trace == nil {
		return
	}
	s.mu.Lock()
	if !s.decided {
		s.lastEnd, s.lastErr, s.hasEnd = monotime.Now(), err, true
	}
	s.mu.Unlock()
}

// raced records the answer of a race of hedges, for the tracer: the error
// that the retry stage acts on (the longest retry-after hint of the race's
// failures), not that of the last attempt to end.
func (s *state) raced(err error) {
	if s == nil || s.trace == nil {
		return
	}
	s.mu.Lock()
	s.lastEnd, s.lastErr, s.hasEnd, s.decided = monotime.Now(), err, true, true
	s.mu.Unlock()
}

// next returns the number the next attempt would take, for the event of
// one refused before it was sent.
func (s *state) next() int {
	if s == nil {
		return 0
	}
	return int(s.n.Load()) + 1
}

// errPanicked is what the tracer and the adaptive stages are told of an
// attempt that panicked or called runtime.Goexit.
var errPanicked = errors.New("pipeline: the operation panicked or called runtime.Goexit")
