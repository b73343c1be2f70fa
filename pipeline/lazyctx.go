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

	made       atomic.Bool        // inner is set, and no longer changes
	ended      atomic.Bool        // end was called
	mu         sync.Mutex         // makes inner
	inner      context.Context    // context.WithDeadlineCause, once asked for
	stop       context.CancelFunc // inner's
	endedFirst bool               // end came before any other end seen; mu is held
}

func (c *lazyCtx) Deadline() (time.Time, bool) {
	d, ok := c.Context.Deadline()
	if c.deadline.IsZero() || ok && d.Before(c.deadline) {
		return d, ok // the parent's, as the standard context says
	}
	return c.deadline, true
}

func (c *lazyCtx) Done() <-chan struct{} { return c.standard().Done() }

func (c *lazyCtx) Err() error {
	if c.made.Load() {
		return c.inner.Err()
	}
	if !c.ended.Load() && c.Context.Err() == nil && (c.deadline.IsZero() || time.Until(c.deadline) > 0) {
		return nil
	}
	// Ended, canceled or past the deadline: through the standard context,
	// whose Done and context.Cause agree with its Err (the parent's own Err
	// may already answer while its cancellation has yet to reach a child
	// made from it).
	return c.standard().Err()
}

func (c *lazyCtx) Value(key any) any {
	if c.made.Load() {
		return c.inner.Value(key)
	}
	return c.Context.Value(key)
}

// standard returns the standard context that stands for c, making it on
// first use; one that the call has ended is canceled already.
func (c *lazyCtx) standard() context.Context {
	if c.made.Load() {
		return c.inner
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.made.Load() {
		if c.endedFirst {
			// Canceled, as the standard context's cancel function would
			// have left it, whatever ended after.
			c.inner, c.stop = context.WithCancel(context.WithoutCancel(c.Context))
		} else if c.deadline.IsZero() {
			c.inner, c.stop = context.WithCancel(c.Context)
		} else {
			c.inner, c.stop = context.WithDeadlineCause(c.Context, c.deadline, c.cause)
		}
		if c.ended.Load() {
			c.stop()
		}
		c.made.Store(true)
	}
	return c.inner
}

// end ends the use of c, as the cancel function of
// context.WithDeadlineCause does: c is canceled, and its timer, if made,
// stopped.
func (c *lazyCtx) end() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.made.Load() && !c.ended.Load() && c.Context.Err() == nil {
		// Nothing saw the deadline pass, and reading the clock here would
		// cost every call: as far as anyone can tell, the call ended first.
		c.endedFirst = true
	}
	c.ended.Store(true)
	if c.stop != nil {
		c.stop()
	}
}

func (c *lazyCtx) String() string { return "pipeline.lazyCtx(" + c.deadline.String() + ")" }
