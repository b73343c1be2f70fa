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

	n        atomic.Int32     // attempts started
	mu       sync.Mutex       // hedged attempts run at once: for the tracer's fields
	over     bool             // the call's span has ended: no attempt's starts
	hasEnd   bool             // an attempt ended, while tracing: lastEnd is set
	decided  bool             // a race's answer is lastErr, until the next attempt not a hedge starts
	starting int32            // attempts' spans the tracer is starting, outside mu
	lastEnd  monotime.Reading // when the last attempt ended, while tracing
	lastErr  error
	pending  *error // end's, while spans start: the last of them ends the call's span
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
// admitted as its call returned, which is then not sent). Every attempt's
// span starts before the call's ends: an end that comes while spans
// start is left to the last of them. The tracer is called outside s.mu: a
// slow one holds up neither the call's return nor another attempt being
// numbered (start).
func (s *state) span(ctx context.Context, info resilience.AttemptInfo) (context.Context, func(error), bool) {
	s.mu.Lock()
	if s.over {
		s.mu.Unlock()
		return ctx, nil, false
	}
	s.starting++
	s.mu.Unlock()
	defer func() { // also when the tracer calls runtime.Goexit
		s.mu.Lock()
		var ended *error
		if s.starting--; s.starting == 0 {
			ended, s.pending = s.pending, nil
		}
		s.mu.Unlock()
		if ended != nil {
			safe.EndCall(s.trace, *ended)
		}
	}()
	ctx, end := safe.StartAttempt(s.trace, ctx, info)
	return ctx, end, true
}

// end ends the call's span, or leaves it to the last attempt's span that
// is starting; none starts after it.
func (s *state) end(err error) {
	s.mu.Lock()
	s.over = true
	if s.starting > 0 {
		pending := err // on the heap only here: err itself stays on the stack
		s.pending = &pending
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	safe.EndCall(s.trace, err)
}

// traced reports whether the call's attempts have spans (WithTracer).
func (s *state) traced() bool { return s != nil && s.trace != nil }

// ended records the end of an attempt, for the tracer; not that of a
// hedge that ends after its race was decided (raced).
func (s *state) ended(err error) {
	if !s.traced() {
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
	if !s.traced() {
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
