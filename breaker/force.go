package breaker

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/resiliencekit/resiliencekit/internal/monotime"
	"github.com/resiliencekit/resiliencekit/internal/sendtime"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// Mode is how a breaker decides: by itself ([Normal]), or as an operator
// set it with [Breaker.SetMode]. The zero Mode is Normal.
type Mode uint8

// The modes of a breaker.
const (
	// Normal: the breaker decides by its thresholds (the default).
	Normal Mode = iota
	// ForcedOpen: every call is rejected at once with an error matching
	// [ErrForcedOpen] and [ErrOpen], until the mode changes.
	ForcedOpen
	// ForcedClosed: every call goes through and the breaker's thresholds
	// are not applied; its outcomes are counted for [Breaker.Snapshot]
	// only. The state machine is left where it was, and goes on from there
	// when the mode is Normal again.
	ForcedClosed
	// Disabled: the breaker counts and changes state as in Normal (metrics
	// only) but rejects nothing: a call it would have rejected goes through
	// uncounted. Its own listener ([WithListener]) still hears the
	// rejections it would have made.
	Disabled
)

// String returns "normal", "forced-open", "forced-closed" or "disabled".
func (m Mode) String() string {
	switch m {
	case Normal:
		return "normal"
	case ForcedOpen:
		return "forced-open"
	case ForcedClosed:
		return "forced-closed"
	case Disabled:
		return "disabled"
	}
	return "mode(" + strconv.Itoa(int(m)) + ")"
}

// ParseMode returns the Mode whose String is s.
func ParseMode(s string) (Mode, error) {
	for m := Normal; m <= Disabled; m++ {
		if m.String() == s {
			return m, nil
		}
	}
	return Normal, fmt.Errorf("breaker: unknown mode %q", s)
}

// ErrForcedOpen is matched by the error of a call rejected by a breaker
// forced open ([ForcedOpen]); it matches [ErrOpen] too, so code that
// handles an open breaker handles a forced one alike. Its message says
// "forced open".
var ErrForcedOpen error = forcedOpen{}

type forcedOpen struct{}

func (forcedOpen) Error() string                     { return "circuit breaker is forced open" }
func (forcedOpen) Is(target error) bool              { return target == ErrOpen }
func (forcedOpen) ResilienceClass() resilience.Class { return resilience.ClassTerminal }

// ModeChange is the Err of the [resilience.EventStateChange] event that a
// [Breaker.SetMode] reports (From and To are the states a caller sees
// before and after it, equal if the change left them alike): find it with
// [errors.As]. It says who made the change.
type ModeChange struct {
	From, To Mode
	// By is who made the change, as given to SetMode.
	By string
	// Fleet says the change came from the shared store: another replica
	// set it fleet-wide.
	Fleet bool
}

// Error says what changed and who changed it, such as "mode normal ->
// forced-open by alice".
func (c *ModeChange) Error() string {
	s := "mode " + c.From.String() + " -> " + c.To.String()
	if c.By != "" {
		s += " by " + c.By
	}
	if c.Fleet {
		s += " (fleet)"
	}
	return s
}

// Forcing is a mode an operator set ([Breaker.SetMode]): the mode, who set
// it and when, as [Breaker.Mode] returns it and a [SharedForcer] keeps it
// fleet-wide.
type Forcing struct {
	Mode Mode
	By   string
	At   time.Time
}

// SharedForcer is implemented by a [SharedStore] that can hold a forced
// mode fleet-wide: [Breaker.SetMode] on one replica writes it there
// (Force), and every replica, seeing a newer [Fleet.ForceVersion] in the
// answer to its next flush, reads it (Forced) and takes it. A replica that
// cannot reach the store keeps the mode it has. A store that went back in
// time (restarted empty, or from an older snapshot) answers an older
// version than a replica took: the replica keeps its mode and writes it
// back under that version (Restore), and of the modes written back the
// newest version's stays. Implementations are safe for concurrent use and
// honour ctx's deadline.
type SharedForcer interface {
	// Force keeps f as the fleet's mode of the breaker called name under a
	// new version, greater than the store's and than after (the newest the
	// replica has taken): the server's time in ms, say, so that a store
	// that lost its state does not give a new mode an older version than
	// the replicas took.
	Force(ctx context.Context, name string, f Forcing, after uint64) error
	// Restore keeps f as the fleet's mode under version, unless the store
	// holds a version at least as new, in one atomic step.
	Restore(ctx context.Context, name string, f Forcing, version uint64) error
	// Forced returns the fleet's mode of the breaker called name and its
	// version, read together: the zero Forcing and 0 if none was ever set.
	Forced(ctx context.Context, name string) (Forcing, uint64, error)
}

// forcing is a breaker's forced mode; a nil *forcing is Normal.
type forcing struct {
	Forcing
	fleet  bool
	reject error // for ForcedOpen: the breaker's error
	// Counted under ForcedClosed, for Snapshot.
	requests, failures, exclusions, successes atomic.Uint64
}

// farFuture is what the wait queue takes for the opening time of a
// breaker forced open: no probe is coming. A call does not wait for one
// (pipeline.WaitWhenOpen): [Breaker.Wait] fails fast with the forced-open
// error, and forcing open lets the calls already waiting go, to be
// rejected with it.
const farFuture = math.MaxInt64 / 2

// forceTimeout bounds SetMode's write of a mode to a [SharedForcer]: one
// that fails is sent again by the flusher (resendForcing).
const forceTimeout = 2 * time.Second

// SetMode forces the breaker into mode m ([ForcedOpen], [ForcedClosed],
// [Disabled]) or gives it back its own decisions ([Normal]), reporting the
// change to its listeners as a [resilience.EventStateChange] whose Err is a
// [*ModeChange] naming by. For a shared breaker whose store is a
// [SharedForcer], the mode is set fleet-wide: the store's write, with the
// wait for a write of a mode under way, is bounded by ctx and by 2 s, and
// SetMode returns its error; this replica takes the
// mode anyway, and its flusher writes it again after the next flush that
// reaches the store, unless the store holds a mode another replica set
// that this one had not taken when it set its own (by versions, not by
// clocks). Default Normal. It is safe for
// concurrent use; on a nil or zero Breaker it does nothing.
func (b *Breaker) SetMode(ctx context.Context, m Mode, by string) error {
	if b == nil || b.cb == nil {
		return nil
	}
	if m > Disabled {
		return fmt.Errorf("breaker: SetMode(%v): no such mode", m)
	}
	// At in whole milliseconds, as a store keeps it.
	f := Forcing{Mode: m, By: by, At: time.UnixMilli(time.Now().UnixMilli())}
	b.setForcing(f, false)
	if b.fleet != nil {
		if sf, ok := b.fleet.store.(SharedForcer); ok {
			return b.resend.force(ctx, b.fleet.life.Done(), sf, b.Name(), f, b.forceSeen.Load())
		}
	}
	return nil
}

// resend is a shared breaker's mode that SetMode could not write to the
// store, for the flusher to write again: so that a store fault does not
// leave the other replicas in the mode set before (forced open, say, while
// the dependency is healthy).
type resend struct {
	// writing is a token held around each write (made with the fleet), so
	// that a resend never overwrites a later SetMode's, and taken within
	// SetMode's bound.
	writing chan struct{}
	mu      sync.Mutex // guards the fields below; never held across a write
	pending *Forcing   // the newest mode SetMode set, until written or overtaken
	seen    uint64     // the newest version the replica had taken when pending was set
	written Forcing    // the last mode the replica wrote: its own, under a version it may not have taken yet
}

// force writes f to the store, within ctx and forceTimeout (a later
// SetMode's mode instead, if one came meanwhile), and keeps it to write
// again if that fails.
func (r *resend) force(ctx context.Context, stop <-chan struct{}, sf SharedForcer, name string, f Forcing, after uint64) error {
	ctx, cancel := context.WithTimeout(ctx, forceTimeout)
	defer cancel()
	r.mu.Lock()
	r.pending, r.seen = &f, after
	r.mu.Unlock()
	select {
	case r.writing <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("breaker: SetMode: an earlier write of a mode to the shared store had not ended: %w", context.Cause(ctx))
	}
	defer func() { <-r.writing }()
	r.mu.Lock()
	p, seen := r.pending, r.seen
	r.mu.Unlock()
	if p == nil {
		return nil // written by the write before, a later SetMode's
	}
	return r.write(ctx, stop, sf, name, p, seen)
}

// write writes p, the pending mode, to the store under a version after
// after; r.writing is held.
func (r *resend) write(ctx context.Context, stop <-chan struct{}, sf SharedForcer, name string, p *Forcing, after uint64) error {
	err := safelyDo(ctx, stop, "Force", func() error { return sf.Force(ctx, name, *p, after) })
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil {
		r.written = *p
		r.drop(p)
	}
	return err
}

// drop forgets p if it is still the pending mode; r.mu is held.
func (r *resend) drop(p *Forcing) {
	if r.pending == p {
		r.pending = nil
	}
}

// resendForcing writes again the mode SetMode could not write, on the
// flusher's goroutine after a flush that reached the store, by the
// flush's deadline, unless the
// store holds one the replica had not taken when it was set (another
// replica's, set meanwhile: it is taken as usual). Versions decide, not
// the replicas' clocks.
func (b *Breaker) resendForcing(deadline time.Time) {
	r := &b.resend
	select {
	case r.writing <- struct{}{}:
	default:
		return // a SetMode is writing: its mode is the one to keep
	}
	defer func() { <-r.writing }()
	r.mu.Lock()
	p, seen, written := r.pending, r.seen, r.written
	r.mu.Unlock()
	sf, ok := b.fleet.store.(SharedForcer)
	if p == nil || !ok {
		return
	}
	ctx, cancel := context.WithDeadline(b.fleet.life, deadline)
	defer cancel()
	cur, v, err := forced(ctx, b.fleet.life.Done(), sf, b.Name())
	switch {
	case err != nil:
		return // at a later flush
	case v > seen && !sameForcing(cur, written):
		r.mu.Lock()
		r.drop(p)
		r.mu.Unlock()
	default:
		_ = r.write(ctx, b.fleet.life.Done(), sf, b.Name(), p, max(v, b.forceSeen.Load()))
	}
}

// forced is sf.Forced, through [safely].
func forced(ctx context.Context, stop <-chan struct{}, sf SharedForcer, name string) (Forcing, uint64, error) {
	type mode struct {
		f Forcing
		v uint64
	}
	m, err := safely(ctx, stop, "Forced", func() (mode, error) { f, v, err := sf.Forced(ctx, name); return mode{f, v}, err })
	return m.f, m.v, err
}

// sameForcing reports whether a and b are one mode set once: a store keeps
// At in whole milliseconds, as SetMode makes it.
func sameForcing(a, b Forcing) bool {
	return a.Mode == b.Mode && a.By == b.By && a.At.Equal(b.At)
}

// waitForced is [Breaker.Wait]'s answer for a breaker in a forced mode
// (forced true): forced open fails fast with its error; forced closed and
// disabled reject nothing, so nothing need wait (err nil).
func (b *Breaker) waitForced() (forced bool, err error) {
	if f := b.force.Load(); f != nil {
		return true, f.reject
	}
	return false, nil
}

// Mode returns the breaker's mode, who set it and when (the zero Forcing
// for one that was never set). It takes no lock and is safe for
// concurrent use.
func (b *Breaker) Mode() Forcing {
	if b == nil {
		return Forcing{}
	}
	if f := b.force.Load(); f != nil {
		return f.Forcing
	}
	return b.normal.Load().orZero()
}

// setForcing applies f, from this replica (fleet false) or the store.
func (b *Breaker) setForcing(f Forcing, fleet bool) {
	b.forceMu.Lock()
	defer b.forceMu.Unlock()
	old := b.force.Load()
	from, before := Normal, b.State()
	if old != nil {
		from = old.Mode
	}
	if fleet && old == nil && f.Mode == Normal {
		return // the fleet's Normal, which this replica is in already
	}
	if fleet && old != nil && old.Mode == f.Mode && old.By == f.By && old.At.Equal(f.At) {
		return // this replica's own change, back from the store
	}
	var next *forcing
	if f.Mode != Normal {
		next = &forcing{Forcing: f, fleet: fleet}
		if f.Mode == ForcedOpen {
			next.reject = &forcedRejection{name: b.Name(), by: f.By}
		}
	} else {
		n := f
		b.normal.Store(&n)
	}
	wasOpen := old != nil && old.Mode == ForcedOpen
	b.force.Store(next)
	switch {
	case f.Mode == ForcedOpen && !wasOpen:
		b.openedBefore.Store(b.wait.openedAt.Swap(farFuture))
		b.changedWaiting(resilience.StateOpen, true)
	case f.Mode != ForcedOpen && wasOpen:
		b.wait.openedAt.CompareAndSwap(farFuture, b.openedBefore.Load())
	}
	if f.Mode != Normal || wasOpen {
		// The waiting calls try again: forced open rejects them at once
		// (and Wait does not wait for it), forced closed and disabled let
		// them through, Normal has them wait again if need be.
		b.wait.release(math.MaxInt)
	}
	after := b.State()
	b.history.add(Transition{At: f.At, From: before, To: after, Reason: modeReason(from, f, fleet)})
	b.emit(resilience.Event{Kind: resilience.EventStateChange, Name: b.Name(), From: before, To: after,
		Err: &ModeChange{From: from, To: f.Mode, By: f.By, Fleet: fleet}})
}

// takeForcing takes the fleet's mode from the store, on the flusher's
// goroutine by the flush's deadline, when its version is newer than the
// one last taken. An older
// one is a store that went back in time (restarted empty, or from an
// older snapshot): the replica keeps the mode it took and writes it back
// under its version at once, so that a mode revoked since does not come
// back to the replicas that start now, and a replica that missed a change
// does not give the fleet its older mode.
func (b *Breaker) takeForcing(version uint64, deadline time.Time) {
	sf, ok := b.fleet.store.(SharedForcer)
	seen := b.forceSeen.Load()
	if !ok || version == seen {
		return
	}
	ctx, cancel := context.WithDeadline(b.fleet.life, deadline)
	defer cancel()
	f, v, err := forced(ctx, b.fleet.life.Done(), sf, b.Name())
	switch {
	case err != nil, v == seen:
		return // at a later flush, if need be
	case v < seen:
		_ = safelyDo(ctx, b.fleet.life.Done(), "Restore", func() error { return sf.Restore(ctx, b.Name(), b.forceTaken, seen) }) // or at a later flush
		return
	}
	b.forceSeen.Store(v)
	b.forceTaken = f
	if f == (Forcing{}) {
		return
	}
	b.setForcing(f, true)
}

// holdForced keeps the wait queue of a breaker forced open waiting for the
// mode to change, after a state change of the breaker underneath.
func (b *Breaker) holdForced() {
	if f := b.force.Load(); f != nil && f.Mode == ForcedOpen {
		b.openedBefore.Store(b.wait.openedAt.Swap(farFuture))
	}
}

func modeReason(from Mode, f Forcing, fleet bool) string {
	s := "mode " + from.String() + " -> " + f.Mode.String()
	if f.By != "" {
		s += " by " + f.By
	}
	if fleet {
		s += " (fleet-wide)"
	}
	return s
}

// forcedRejection is the error of a call to a breaker forced open.
type forcedRejection struct{ name, by string }

func (r *forcedRejection) Error() string {
	s := "breaker " + strconv.Quote(r.name) + ": " + ErrForcedOpen.Error()
	if r.by != "" {
		s += " by " + r.by
	}
	return s
}

func (r *forcedRejection) Unwrap() error { return ErrForcedOpen }

func (r *forcedRejection) ResilienceClass() resilience.Class { return resilience.ClassTerminal }

// state is the state a caller sees of a breaker in mode f.
func (f *forcing) state(b *Breaker) (resilience.State, bool) {
	switch f.Mode {
	case ForcedOpen:
		return resilience.StateOpen, true
	case ForcedClosed:
		return resilience.StateClosed, true
	}
	return 0, false
}

// check is Check for a breaker in mode f: only a forced open one stops
// retries.
func (f *forcing) check() error { return f.reject }

// executeForced is Execute for a breaker in mode f.
func (b *Breaker) executeForced(ctx context.Context, f *forcing, op func(ctx context.Context) error) error {
	switch f.Mode {
	case ForcedOpen:
		return b.reject(f.reject)
	case ForcedClosed:
		a := admission{at: monotime.Now()}
		f.requests.Add(1)
		returned := false
		defer func() {
			if !returned { // a panic or Goexit, which goes on: left out, as in Normal
				f.exclusions.Add(1)
			}
		}()
		err := op(ctx)
		returned = true
		a.at, err = sendtime.Open(a.at, err)
		switch b.count(ctx, err, a) {
		case failed:
			f.failures.Add(1)
		case excluded:
			f.exclusions.Add(1)
		default:
			f.successes.Add(1)
			b.cb.answer(a.at)
		}
		return err
	}
	// Disabled: as in Normal, but what it would reject goes through.
	ran := false
	err := b.executeNormal(ctx, func(ctx context.Context) error {
		ran = true
		return op(ctx)
	})
	if !ran && IsRejection(err) {
		return op(ctx)
	}
	return err
}

// orZero returns *f, or the zero Forcing for a nil f.
func (f *Forcing) orZero() Forcing {
	if f == nil {
		return Forcing{}
	}
	return *f
}
