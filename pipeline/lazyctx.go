package pipeline

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/resiliencekit/resiliencekit/internal/monotime"
)

// lazyCtx is a context capped at a deadline (a call's time budget, an
// attempt's timeout), made at the cost of one allocation of 64 bytes: it
// keeps the deadline, as a reading of the monotonic clock, and makes the
// timer and the channel that context.WithDeadlineCause makes at once only
// when something asks for them (Done, or a context derived from it). An
// operation that answers without watching its context, as a cache or an
// in-process call does, never pays for them; one that watches it, as any
// network client does, pays what context.WithDeadline costs, and one
// allocation more.
//
// Deadline, Err, Value and context.Cause answer as
// context.WithDeadlineCause's context would, with two differences. The
// standard context's timer sees the deadline pass as it does, a lazy one
// only when asked (Err reads the clock while nothing has asked for Done):
// so after a deadline that passed unseen and then another end (the
// parent's, or the call's), it reports that end (Canceled, or the parent's
// cause), where the standard context reports DeadlineExceeded. And the
// deadline is set from a reading of the monotonic clock alone, half the
// cost of time.Now, which Deadline pays when asked (monotime.Reading.Time):
// its monotonic reading is the deadline's exactly, and its wall clock
// reading the wall clock's then plus the time left. No deadline (lazyTimed
// not set) stands for context.WithCancel(parent), made as lazily. It is
// safe for concurrent use.
type lazyCtx struct {
	context.Context                  // the caller's, until inner is made
	at              monotime.Reading // the deadline, with lazyTimed
	state           atomic.Uint32    // lazy* bits

	mu    sync.Mutex         // makes inner
	inner context.Context    // context.WithDeadlineCause, once asked for
	stop  context.CancelFunc // inner's
}

// The bits of lazyCtx.state.
const (
	lazyEnded      = 1 << iota // end was called
	lazyEndedFirst             // end came before any other end seen
	lazyMaking                 // standard holds mu to make inner: end waits for it
	lazyMade                   // inner is set, and no longer changes
	// lazyFresh: the deadline had not passed at the clock reading it was
	// set from, a moment ago, and nothing has asked c anything since; the
	// first Err answers from that reading. The budget's context is fresh,
	// and the pipeline's check before anything is sent (the retry
	// stage's, or the breaker's) asks it first, before any operation sees
	// it. An attempt's context, given to its operation at once, is not.
	lazyFresh
	lazyTimed   // c has a deadline, at
	lazyAttempt // an attempt's: its deadline's cause is ErrAttemptTimeout
)

// freshMargin is how far a deadline must be from the reading it was set
// from for the first Err to answer from that reading: a deadline closer
// than that is checked on the clock at once, as any later one is.
const freshMargin = time.Millisecond

// set makes c, in zeroed memory and not yet shared, parent capped at d
// after now (an attempt's if attempt), and, for a budget, fresh if the
// deadline is far enough from now.
func (c *lazyCtx) set(parent context.Context, now monotime.Reading, d time.Duration, attempt bool) {
	c.Context, c.at = parent, now.Add(d)
	bits := uint32(lazyTimed)
	switch {
	case attempt:
		bits |= lazyAttempt
	case d >= freshMargin:
		bits |= lazyFresh
	}
	c.state.Store(bits)
}

// cause is what ends c at its deadline: ErrAttemptTimeout for an
// attempt's, nil (DeadlineExceeded) for the budget's.
func (c *lazyCtx) cause() error {
	if c.state.Load()&lazyAttempt != 0 {
		return ErrAttemptTimeout
	}
	return nil
}

// stale ends c's freshness: it was asked something else first.
func (c *lazyCtx) stale() {
	if c.state.Load()&lazyFresh != 0 {
		c.state.And(^uint32(lazyFresh))
	}
}

func (c *lazyCtx) Deadline() (time.Time, bool) {
	c.stale()
	d, ok := c.Context.Deadline()
	if c.state.Load()&lazyTimed == 0 {
		return d, ok
	}
	if at := c.at.Time(); !ok || !d.Before(at) {
		return at, true
	}
	return d, ok // the parent's, as the standard context says
}

func (c *lazyCtx) Done() <-chan struct{} { return c.standard().Done() }

func (c *lazyCtx) Err() error {
	s := c.state.Load()
	if s&lazyMade != 0 {
		return c.inner.Err()
	}
	if s&lazyEnded == 0 && c.Context.Err() == nil && (s&lazyTimed == 0 || s&lazyFresh != 0 && c.state.CompareAndSwap(s, s&^lazyFresh) || monotime.Now() < c.at) {
		return nil
	}
	// Ended, canceled or past the deadline: through the standard context,
	// whose Done and context.Cause agree with its Err (the parent's own Err
	// may already answer while its cancellation has yet to reach a child
	// made from it).
	return c.standard().Err()
}

func (c *lazyCtx) Value(key any) any {
	c.stale()
	if c.state.Load()&lazyMade != 0 {
		return c.inner.Value(key)
	}
	return c.Context.Value(key)
}

// standard returns the standard context that stands for c, making it on
// first use; one that the call has ended is canceled already.
func (c *lazyCtx) standard() context.Context {
	if c.state.Load()&lazyMade != 0 {
		return c.inner
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.state.Or(lazyMaking); s&lazyMade == 0 {
		// From here on end waits for mu; an end before this is in s.
		s = c.state.Load()
		if s&lazyEndedFirst != 0 {
			// Canceled, as the standard context's cancel function would
			// have left it, whatever ended after.
			c.inner, c.stop = context.WithCancel(context.WithoutCancel(c.Context))
		} else if s&lazyTimed == 0 {
			c.inner, c.stop = context.WithCancel(c.Context)
		} else {
			c.inner, c.stop = context.WithDeadlineCause(c.Context, c.at.Time(), c.cause())
		}
		if s&lazyEnded != 0 {
			c.stop()
		}
		c.state.Or(lazyMade)
	}
	return c.inner
}

// end ends the use of c, as the cancel function of
// context.WithDeadlineCause does: c is canceled, and its timer, if made,
// stopped. It takes no lock unless the standard context is made.
func (c *lazyCtx) end() {
	for s := c.state.Load(); s&lazyMaking == 0; s = c.state.Load() {
		n := s | lazyEnded
		if s&lazyEnded == 0 && !endedQuietly(c.Context) {
			// Nothing saw the deadline pass, and reading the clock here
			// would cost every call: as far as anyone can tell, the call
			// ended first.
			n |= lazyEndedFirst
		}
		if c.state.CompareAndSwap(s, n) {
			return
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.state.Or(lazyEnded)
	c.stop()
}

// endedQuietly reports whether ctx has ended as far as can be told without
// reading the clock: a lazy context's deadline that passed unseen is not
// seen here either, as with its own.
func endedQuietly(ctx context.Context) bool {
	if lc, ok := ctx.(*lazyCtx); ok {
		s := lc.state.Load()
		if s&lazyMade != 0 {
			return lc.inner.Err() != nil
		}
		return s&lazyEnded != 0 || endedQuietly(lc.Context)
	}
	return ctx.Err() != nil
}

func (c *lazyCtx) String() string {
	if c.state.Load()&lazyTimed == 0 {
		return "pipeline.lazyCtx"
	}
	return "pipeline.lazyCtx(" + c.at.Time().String() + ")"
}
