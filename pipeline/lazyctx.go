package pipeline

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// lazyCtx is a context capped at a deadline (a call's time budget, an
// attempt's timeout), made at the cost of one allocation: it keeps the
// deadline, and makes the timer and the channel that
// context.WithDeadlineCause makes at once only when something asks for
// them (Done, or a context derived from it). An operation that
// answers without watching its context, as a cache or an in-process call
// does, never pays for them; one that watches it, as any network client
// does, pays what context.WithDeadline costs, and one allocation more.
//
// Deadline, Err, Value and context.Cause answer as
// context.WithDeadlineCause's context would, with one difference: the
// standard context's timer sees the deadline pass as it does, a lazy one
// only when asked (Err reads the clock while nothing has asked for Done).
// So after a deadline that passed unseen and then another end (the
// parent's, or the call's), it reports that end (Canceled, or the parent's
// cause), where the standard context reports DeadlineExceeded. A zero
// deadline sets none: it then stands for context.WithCancel(parent), made
// as lazily. It is safe for concurrent use.
type lazyCtx struct {
	context.Context // the caller's, until inner is made
	deadline        time.Time
	cause           error // of the deadline, as context.WithDeadlineCause's

	state atomic.Uint32      // lazy* bits
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
)

// freshMargin is how far a deadline must be from the reading it was set
// from for the first Err to answer from that reading: a deadline closer
// than that is checked on the clock at once, as any later one is.
const freshMargin = time.Millisecond

// setFresh marks c's deadline as not passed at now, the reading it was
// set from, if it is far enough from it.
func (c *lazyCtx) setFresh(now time.Time) {
	if c.deadline.Sub(now) >= freshMargin {
		c.state.Store(lazyFresh)
	}
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
	if c.deadline.IsZero() || ok && d.Before(c.deadline) {
		return d, ok // the parent's, as the standard context says
	}
	return c.deadline, true
}

func (c *lazyCtx) Done() <-chan struct{} { return c.standard().Done() }

func (c *lazyCtx) Err() error {
	s := c.state.Load()
	if s&lazyMade != 0 {
		return c.inner.Err()
	}
	if s&lazyEnded == 0 && c.Context.Err() == nil && (c.deadline.IsZero() || s&lazyFresh != 0 && c.state.CompareAndSwap(s, s&^lazyFresh) || time.Until(c.deadline) > 0) {
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
		} else if c.deadline.IsZero() {
			c.inner, c.stop = context.WithCancel(c.Context)
		} else {
			c.inner, c.stop = context.WithDeadlineCause(c.Context, c.deadline, c.cause)
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

func (c *lazyCtx) String() string { return "pipeline.lazyCtx(" + c.deadline.String() + ")" }
