package breaker

import (
	"context"
	"errors"
	"sync/atomic"
	"time"
)

// waiting is what Wait needs of a Breaker: a channel closed at its next
// change of state, made only once someone waits, and when it last opened.
type waiting struct {
	changes  atomic.Pointer[chan struct{}]
	openedAt atomic.Int64 // unix nanoseconds of the last change to Open
}

// changed wakes every Wait in progress; it is called on every change of
// state, local or of the fleet.
func (w *waiting) changed(to State) {
	if to == Open {
		w.openedAt.Store(time.Now().UnixNano())
	}
	w.wake()
}

// wake wakes every Wait in progress without a change of state: a probe
// slot came free.
func (w *waiting) wake() {
	if ch := w.changes.Swap(nil); ch != nil {
		close(*ch)
	}
}

// next returns a channel closed at the next change of state.
func (w *waiting) next() <-chan struct{} {
	for {
		if ch := w.changes.Load(); ch != nil {
			return *ch
		}
		ch := make(chan struct{})
		if w.changes.CompareAndSwap(nil, &ch) {
			return ch
		}
	}
}

// NextProbe returns when the breaker, open, will let a probe through: its
// open timeout after it opened. It is the zero Time unless the breaker is
// open.
func (b *Breaker) NextProbe() time.Time {
	if b.State() != Open {
		return time.Time{}
	}
	return time.Unix(0, b.wait.openedAt.Load()).Add(b.cfg.openTimeout)
}

// Wait waits, after b rejected a call with rejection (an error matching
// [ErrOpen] or [ErrTooManyRequests]), until the call is worth trying
// again, and returns nil: b has changed state (it is woken at once by the
// probe that closes it), or its open timeout has run out so that the call
// may be the probe. It returns rejection at once if ctx's deadline comes
// before b could let a probe through, and when ctx is done first. It
// never lets anything through b itself: the caller tries again with
// [Breaker.Execute], and waits again if rejected again. For a shared
// breaker whose fleet is open it looks again every [FlushInterval].
func (b *Breaker) Wait(ctx context.Context, rejection error) error {
	if b == nil || b.cb == nil {
		return nil
	}
	changed := b.wait.next()
	var wake time.Duration
	switch b.State() {
	case Closed:
		return nil
	case HalfOpen:
		if errors.Is(rejection, ErrOpen) {
			return nil // it was open and may take a probe now
		}
		// Its probes are out: wait for their outcome, or a slot that
		// comes free without one (a probe canceled); look again every
		// FlushInterval all the same, for a fleet's grant.
		wake = b.cfg.flush
	case Open:
		next := b.NextProbe()
		if b.fleet != nil && State(b.fleet.state.Load()) == Open {
			next = time.Now().Add(b.cfg.flush)
		}
		if d, ok := ctx.Deadline(); ok && d.Before(next) {
			return rejection // no probe within the budget
		}
		// Open until just past next (gobreaker's own rule): sleep past it
		// at least, and never spin.
		wake = max(time.Until(next), 0) + time.Nanosecond
	}
	if sleepUntil(ctx, changed, wake) != nil {
		return rejection
	}
	return nil
}

// sleepUntil waits for changed, or d if positive, or ctx, whichever
// comes first, and returns ctx's error if ctx came first.
func sleepUntil(ctx context.Context, changed <-chan struct{}, d time.Duration) error {
	var timeout <-chan time.Time
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-changed:
	case <-timeout:
	}
	return nil
}
