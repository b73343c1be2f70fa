package breaker

import (
	"container/list"
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/resiliencekit/resiliencekit/internal/monotime"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// waiting is the queue of calls in [Breaker.Wait]. They go
// [HalfOpenRequests] of them when the breaker turns half-open, to be its
// probes, one when a probe slot comes free with no change of state (those
// with the most time left first), and all, in the order they came, when
// it closes.
type waiting struct {
	n        atomic.Int32 // waiters queued; read without the lock on every call
	openedAt atomic.Int64 // the last change to Open, a monotime.Reading: a wall clock stepped while open moves no probe

	mu       sync.Mutex
	queue    list.List // of *waiter, oldest first
	released time.Time // last release
	timer    *time.Timer
	gen      int // of the timer: a tick of an earlier one does nothing
	freed    int // half-open probe slots freed with nobody waiting
}

// waiter is one call in Wait. ch is closed when it may go, or when it
// must give up (gaveUp set first).
type waiter struct {
	ch       chan struct{}
	deadline time.Time // the zero Time if none
	gaveUp   bool
	elem     *list.Element
}

// changedWaiting is called on every change of state, local or of the
// fleet, with the core's lock held for a local one: it must not ask for
// the state. NextProbe is the local breaker's, so only its opening sets
// openedAt; the fleet, opening, probes an open timeout later too.
func (b *Breaker) changedWaiting(to resilience.State, fleet bool) {
	w := &b.wait
	w.mu.Lock()
	w.freed = 0
	w.mu.Unlock()
	switch to {
	case resilience.StateOpen:
		now := time.Now()
		if !fleet {
			w.openedAt.Store(int64(monotime.Now()))
		}
		if w.n.Load() > 0 {
			w.dropHopeless(now.Add(b.cfg.openTimeout))
		}
	case resilience.StateHalfOpen:
		w.release(int(b.cfg.halfOpenRequests))
	case resilience.StateClosed:
		w.release(math.MaxInt)
	}
}

// probeIgnored frees a half-open breaker's probe slot for a waiter: the
// probe counted for nothing (canceled), so the state does not change. With
// nobody waiting, the slot is kept for the next caller to wait.
func (b *Breaker) probeIgnored() {
	if resilience.State(b.state.Load()) != resilience.StateHalfOpen {
		return
	}
	w := &b.wait
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.queue.Len() > 0 {
		w.releaseLocked(1)
	} else if w.freed < int(b.cfg.halfOpenRequests) {
		w.freed++
	}
}

// release lets n waiters go: all in the order they came, or fewer, the
// probes, by probeLocked.
func (w *waiting) release(n int) {
	if n <= 0 || w.n.Load() == 0 {
		return
	}
	w.mu.Lock()
	w.releaseLocked(n)
	w.mu.Unlock()
}

func (w *waiting) releaseLocked(n int) {
	all := n >= w.queue.Len()
	for ; n > 0; n-- {
		e := w.queue.Front()
		if e == nil {
			return
		}
		wt := e.Value.(*waiter)
		if !all {
			wt = w.probeLocked()
		}
		w.removeLocked(wt)
		close(wt.ch)
	}
	w.released = time.Now()
}

// probeLocked returns the waiter to let go as a probe when not all go:
// the one whose deadline comes last (one without a deadline first), the
// oldest of those alike. The oldest waiter may have too little time left
// to get the probe an answer; a probe it ran out of time in would teach
// nothing, and the next would go to a waiter with as little left.
func (w *waiting) probeLocked() *waiter {
	var best *waiter
	for e := w.queue.Front(); e != nil; e = e.Next() {
		wt := e.Value.(*waiter)
		if best == nil || !best.deadline.IsZero() && (wt.deadline.IsZero() || wt.deadline.After(best.deadline)) {
			best = wt
		}
	}
	return best
}

func (w *waiting) removeLocked(wt *waiter) {
	w.queue.Remove(wt.elem)
	wt.elem = nil
	w.n.Add(-1)
	if w.queue.Len() == 0 && w.timer != nil {
		w.timer.Stop() // so that it does not keep the breaker alive
		w.timer = nil
		w.gen++
	}
}

// dropHopeless tells the waiters whose deadline comes before next, the
// breaker's next probe, to give up now.
func (w *waiting) dropHopeless(next time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for e := w.queue.Front(); e != nil; {
		wt := e.Value.(*waiter)
		e = e.Next()
		if !wt.deadline.IsZero() && wt.deadline.Before(next) {
			w.removeLocked(wt)
			wt.gaveUp = true
			close(wt.ch)
		}
	}
}

// enqueue adds a waiter with ctx's deadline at the back of the queue, and
// starts b's ticks if they are not running.
func (b *Breaker) enqueue(ctx context.Context) *waiter {
	w := &b.wait
	wt := &waiter{ch: make(chan struct{})}
	wt.deadline, _ = ctx.Deadline()
	after := b.tickAfter() // before the lock: the core's is taken first
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.freed > 0 { // a probe slot came free just before: take it
		w.freed--
		close(wt.ch)
		return wt
	}
	wt.elem = w.queue.PushBack(wt)
	if w.n.Add(1) == 1 {
		w.released = time.Now()
	}
	if w.timer == nil {
		w.startTimerLocked(b, after)
	}
	return wt
}

// leave takes wt out of the queue, and reports whether it was still there
// (not released meanwhile).
func (w *waiting) leave(wt *waiter) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if wt.elem == nil {
		return false
	}
	w.removeLocked(wt)
	return true
}

// tickAfter is how long the queue's timer waits from now.
func (b *Breaker) tickAfter() time.Duration {
	if next := b.NextProbe(); !next.IsZero() && (b.fleet == nil || b.fleet.view() != resilience.StateOpen) {
		// Open until just past its next probe (the core's rule: open while
		// no more than the open timeout has passed).
		d := max(time.Until(next), 0)
		if d < math.MaxInt64 {
			d++ // saturated: a probe in 292 years
		}
		return d
	}
	return b.cfg.flush
}

// tick runs while waiters are queued: asking for the state moves an open
// breaker whose time is up to half-open, which releases the probes; a
// half-open queue that nothing released for a FlushInterval (a shared
// breaker's probe granted by the fleet) lets one go, and a closed one all.
func (b *Breaker) tick(gen int) {
	st := b.State()
	after := b.tickAfter()
	w := &b.wait
	w.mu.Lock()
	defer w.mu.Unlock()
	if gen != w.gen {
		return // stopped, and maybe started again since
	}
	if w.queue.Len() == 0 {
		w.timer = nil
		return
	}
	switch {
	case st == resilience.StateClosed:
		w.releaseLocked(math.MaxInt)
	case st == resilience.StateHalfOpen && time.Since(w.released) >= b.cfg.flush:
		w.releaseLocked(1)
	}
	if gen == w.gen { // not stopped by the release above
		w.startTimerLocked(b, after)
	}
}

// startTimerLocked starts the queue's timer, to tick after d.
func (w *waiting) startTimerLocked(b *Breaker, d time.Duration) {
	w.gen++
	gen := w.gen
	w.timer = time.AfterFunc(d, func() { b.tick(gen) })
}

// nextChance is when an open breaker may next let a waiter go: its next
// probe, or, while a shared breaker's fleet is open, its next flush, which
// may bring the fleet's change.
func (b *Breaker) nextChance() time.Time {
	if b.fleet != nil && b.fleet.view() == resilience.StateOpen {
		return time.Now().Add(b.cfg.flush)
	}
	return b.NextProbe()
}

// NextProbe returns when the breaker, open, will let a probe through: its
// open timeout after it opened. It is the zero Time unless the breaker is
// open.
func (b *Breaker) NextProbe() time.Time {
	if b.State() != resilience.StateOpen {
		return time.Time{}
	}
	return monotime.Reading(b.wait.openedAt.Load()).Add(b.cfg.openTimeout).Time()
}

// Wait waits, after b rejected a call with rejection (an error matching
// [ErrOpen] or [ErrTooManyRequests]), until the call is worth trying again,
// and returns nil. It never lets anything through b itself: the caller
// tries again with [Breaker.Execute], and waits again if rejected again.
//
// Waiting calls go [HalfOpenRequests] of them when b turns half-open, to
// be its probes, those with the most time left (their deadline latest, or
// none) first, and all, in the order they came, when a probe closes it (at
// once). A call rejected by a breaker that has closed since does not
// wait. To pace a backlog of waiting calls, pipeline.WaitWhenOpen puts
// their attempts through a concurrency limit.
//
// Wait returns rejection at once if ctx's deadline comes before b could
// let a probe through, and when ctx is done first, or when b opens again
// and its next probe is after ctx's deadline. For a shared breaker whose
// fleet is open it looks again every FlushInterval.
//
// A breaker forced open ([Breaker.SetMode]) is not waited for: Wait
// returns its error ([ErrForcedOpen]) at once, and forcing a breaker open
// lets the calls waiting go, to be rejected at once by it (and not wait
// again). One forced closed or disabled rejects nothing: Wait returns nil
// at once, and forcing either lets the waiting calls go. It is safe for
// concurrent use.
func (b *Breaker) Wait(ctx context.Context, rejection error) error {
	if b == nil || b.cb == nil {
		return nil
	}
	if forced, err := b.waitForced(); forced {
		return err
	}
	switch b.State() {
	case resilience.StateClosed:
		return nil
	case resilience.StateHalfOpen:
		if errors.Is(rejection, ErrOpen) {
			return nil // it was open and may take a probe now
		}
	case resilience.StateOpen:
		if d, ok := ctx.Deadline(); ok && !b.nextChance().Before(d) {
			return rejection // no probe within the budget (review127: one due at the deadline is not)
		}
	}
	if ctx.Err() != nil {
		return rejection // done already: it takes no freed probe slot with it
	}
	wt := b.enqueue(ctx)
	if forced, err := b.waitForced(); forced && b.wait.leave(wt) {
		return err // forced before the waiter was queued
	}
	switch st := b.State(); {
	case st == resilience.StateClosed && b.wait.leave(wt):
		return nil // it closed before the waiter was queued
	case st == resilience.StateOpen && !wt.deadline.IsZero() && !b.nextChance().Before(wt.deadline) && b.wait.leave(wt):
		return rejection // it opened again before the waiter was queued, too late for its deadline
	}
	select {
	case <-wt.ch:
		if wt.gaveUp {
			return rejection
		}
		if ctx.Err() != nil { // released as ctx ended: pass it on
			b.wait.release(1)
			return rejection
		}
		return nil
	case <-ctx.Done():
		if !b.wait.leave(wt) && !wt.gaveUp {
			b.wait.release(1) // it was released as ctx ended: pass it on
		}
		return rejection
	}
}
