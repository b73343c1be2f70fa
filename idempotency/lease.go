package idempotency

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/resiliencekit/resiliencekit/internal/monotime"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// ErrLeaseLost is the cause of the canceled [Claim.Context] of a request
// that lost the lease on its key, and what [Claim.Complete] returns then:
// another request may hold the key now, so the result is not stored.
var ErrLeaseLost = errors.New("idempotency: the lease on the key was lost")

// Claim is the hold of a running request on its key: [Guard.Begin]
// returns it, and the request's work finds it with [FromContext]. Its
// methods are safe for concurrent use.
type Claim struct {
	// Key is the key as stored: scoped, so unique to the caller.
	Key string
	// Record is the claim as stored: its fingerprint and token.
	Record Record
	// TTL is how long the result is to be kept.
	TTL time.Duration

	abandoned, completed, ended, lost atomic.Bool
	keeping                           atomic.Bool // its renewals run (keep), which may yet move it or lose it
	local                             atomic.Bool // claimed on the guard's local records (failed open), not its store
	madeLocal                         atomic.Bool // claimed there as it began, not moved there since
	leftOnStore                       atomic.Bool // its claim timed out on the store, which may write it yet: freed once it ends
	// held is when the lease as last granted runs out, a monotonic
	// reading (monotime): a step of the wall clock does not move it.
	held atomic.Int64

	guard *Guard
	// settled is closed once Begin has its answer for the key: claimed,
	// found (the record the store had, if seen) or err. Another Begin of
	// the key waits for it.
	settled chan struct{}
	claimed bool
	found   Record
	seen    bool
	err     error

	ctx    context.Context
	cancel context.CancelCauseFunc
	stop   func()
}

type claimKey struct{}

// FromContext returns the claim of the request whose context ctx is, or
// nil if it does not run under a key.
func FromContext(ctx context.Context) *Claim {
	c, _ := ctx.Value(claimKey{}).(*Claim)
	return c
}

// Abandon tells the guard that the request committed nothing: the key is
// freed instead of the result stored, so a retry runs the handler again.
// For a handler whose transaction failed. It wins over [Claim.Completed]:
// the key is then freed if it still holds the claim, that is if the
// handler's transaction did not commit; a store frees a claim, never a
// completed record, so a record that did commit stays.
func (c *Claim) Abandon() { c.abandoned.Store(true) }

// Completed tells the guard that the handler stored the result under the
// claim itself, in its own transaction (the SQL store's CompleteTx calls
// it). From then on the guard neither stores a result nor frees the key:
// [Claim.Complete] and [Claim.Release] end the claim and do nothing more,
// whatever the status, whether or not the caller has gone, and after a
// panic too, so that a retry replays the record committed with the effect
// rather than run the effect again. The lease is no longer renewed. If the
// handler's transaction then does not commit, the handler calls
// [Claim.Abandon], which wins. A handler that calls Completed but did not
// store its record leaves the key claimed until the lease runs out.
func (c *Claim) Completed() { c.completed.Store(true) }

// Context returns the context to run the request under: that of
// [Guard.Begin], carrying the claim ([FromContext]), canceled with the
// cause [ErrLeaseLost] if the lease is lost, and canceled when the claim
// ends. For a claim that Begin did not return, it is [context.Background].
func (c *Claim) Context() context.Context {
	if c.ctx == nil {
		return context.Background()
	}
	return c.ctx
}

// Complete ends the claim with the request's result: it stores result
// (its Status, Header, Body, Truncated and Incomplete) under the key for
// [TTL], for repeats to replay; a body over [MaxResponse] is stored as
// Truncated, not replayable. It frees the key instead, as [Claim.Release]
// does, only if the request says that it committed nothing: the claim was
// abandoned ([Claim.Abandon]) or result.Status is one of [ReleaseStatus].
// Whether the caller has gone does not matter: a handler that committed
// and then saw its context end must not run again. If the handler
// completed the claim itself ([Claim.Completed]) and did not abandon it,
// Complete neither stores nor frees anything.
//
// Saving is retried, with backoff, for as long as the claim's lease can be
// renewed: the lease is renewed meanwhile (a failed renewal is tried again
// every min(Lease/12, StoreTimeout/2), and, nearer the lease's end than
// that, at halving intervals down to 1 ms, each bounded by what is left).
// A save is tried until the lease left covers just one [StoreTimeout] (the
// last try is made then, so that it can end before the lease runs out);
// with less left, the save waits for a renewal, and is tried again once
// one gets through. It gives up only when the lease as last renewed runs
// out, another request holds the key, or the saves have failed for a
// whole lease while the renewals got through (a store that refuses the
// record itself). So a store that answers a renewal again before the
// lease granted by the last successful renewal runs out never makes a
// request run twice. That holds for every outage that ends at least
// min(Lease/12, StoreTimeout/2) before then (for a store that hangs rather
// than refuses, plus the StoreTimeout that a renewal sent during it
// waits), so for any outage shorter than two thirds of the lease less
// that, wherever it falls (a renewal comes every third of the lease). A
// claim that the store lost meanwhile (a restart without persistence) is
// taken again, if no one else took the key, and the result stored under
// it.
//
// It returns [ErrLeaseLost] if the lease was lost, and the store's error
// if the result could not be stored, having reported either; the key then
// stays claimed until its lease runs out, and a result not stored is kept
// on the guard's own records (a guard on a store that can fail over to
// them: see [FailOpenAfter]), replayed to this process's repeats. The store is written even if
// ctx is canceled, each call bounded by [StoreTimeout]. After the claim
// has ended, Complete does nothing and returns nil.
func (c *Claim) Complete(ctx context.Context, result Record) error {
	return c.complete(ctx, result, nil)
}

// Completion returns the record that completing c with result stores:
// result's Status, Header, Body, Truncated and Incomplete, with c's
// fingerprint and token, done; a body over the guard's [MaxResponse] is
// left out, as Truncated (not replayable). A store that writes the result
// in the handler's own transaction (such as the SQL store's CompleteTx)
// stores it. A Claim that no guard made (a zero Claim, not one from
// [FromContext] or [Guard.Begin]) has no MaxResponse: its body is kept
// whole. It is safe for concurrent use.
func (c *Claim) Completion(result Record) Record {
	done := Record{
		Fingerprint: c.Record.Fingerprint,
		Token:       c.Record.Token, // so that a save whose answer was lost is recognised as this one's
		Done:        true,
		Status:      result.Status,
		Header:      result.Header,
		Body:        result.Body,
		Truncated:   result.Truncated,
		Incomplete:  result.Incomplete,
	}
	if c.guard != nil && len(done.Body) > c.guard.cfg.maxResponse {
		done.Body, done.Truncated = nil, true
	}
	return done
}

// Local reports whether the claim was made on the guard's own records,
// the guard having failed open as it began (see [FailOpenAfter]), not on
// its store: a handler that writes its result into the store itself, in
// its own transaction (such as the SQL store's CompleteTx), finds no claim
// there, and leaves the result to [Claim.Complete] then. A claim made on
// the store and moved to the guard's records since, its renewals failing,
// is not Local: the store may still hold it, or hold another's claim of
// the key, and a transactional completion must check which, as it fences
// the effect. It is safe for concurrent use.
func (c *Claim) Local() bool { return c.madeLocal.Load() }

// CompleteLater is [Claim.Complete] for a transport that cannot send its
// answer before its handler returns, such as a gRPC unary call: it returns
// once the result is saved (or the key freed), or once a first try to do
// so has failed, within one [StoreTimeout] (two when the key is to be
// freed and a renewal is in flight: it is waited for first); the save then
// goes on, on a goroutine of its own, as Complete's does (for as long as
// the lease can be renewed), and a failure is reported as Complete reports
// it, a store's panic too. So a store that fails holds the answer up for
// a StoreTimeout or two, not for the lease. A process stopped while a save
// goes on leaves the key claimed until the lease runs out, as a crash
// does.
func (c *Claim) CompleteLater(ctx context.Context, result Record) {
	failed, done := make(chan struct{}), make(chan struct{})
	var once sync.Once
	go func() {
		defer close(done)
		defer func() { // a store that panics ends no process here, far from any caller to recover it
			if r := recover(); r != nil {
				c.guard.report(resilience.EventNotStored, c.Key, fmt.Errorf("idempotency: the store panicked saving the result: %v", r))
			}
		}()
		_ = c.complete(context.WithoutCancel(ctx), result, func() { once.Do(func() { close(failed) }) })
	}()
	select {
	case <-done:
	case <-failed:
	}
}

// complete is Complete, calling failed, if not nil, once a first try to
// save the result (or to free the key) has failed and before it is tried
// again.
func (c *Claim) complete(ctx context.Context, result Record, failed func()) error {
	if !c.end() {
		return nil
	}
	defer c.finish()
	g := c.guard
	switch {
	case c.abandoned.Load():
		c.stop()                         // no renewal may take the key again once it is freed
		return g.release(ctx, c, failed) // nothing committed; a record the handler did commit is no claim, and stays
	case c.completed.Load():
		return nil // committed by the handler with its effect: never freed
	case g.cfg.release[result.Status]:
		c.stop()
		return g.release(ctx, c, failed) // the client is told to retry: nothing was processed
	case c.lost.Load():
		g.report(resilience.EventNotStored, c.Key, ErrLeaseLost)
		return ErrLeaseLost
	}
	return g.complete(ctx, c, result, failed)
}

// Release ends the claim by freeing its key, so that a retry runs the
// request again: for a request that committed nothing, or panicked before
// it sent anything. A failure is reported and returned, and the key then
// stays claimed until its lease runs out; a key that the claim no longer
// holds is no failure. After the claim has ended, Release does nothing and
// returns nil, so that a deferred Release frees the key of a request that
// panicked and only that. Of a claim that the handler completed itself
// ([Claim.Completed]) and did not abandon, Release frees nothing: it only
// ends the claim.
func (c *Claim) Release(ctx context.Context) error {
	if !c.end() {
		return nil
	}
	defer c.finish()
	if c.completed.Load() && !c.abandoned.Load() {
		return nil // committed by the handler with its effect: never freed
	}
	c.stop() // no renewal may take the key again once it is freed
	return c.guard.release(ctx, c, nil)
}

// LeaseDeadline returns when the claim's lease, as last renewed, runs
// out: after it, another request may take the key. A handler that
// completes its claim in its own transaction bounds the transaction by it
// (see [Claim.WithLeaseDeadline]). The zero time for a claim that
// [Guard.Begin] did not return.
func (c *Claim) LeaseDeadline() time.Time {
	if c.stop == nil {
		return time.Time{}
	}
	return c.heldUntil().Time()
}

// WithLeaseDeadline returns ctx bounded by the claim's lease, for the
// transaction that completes the claim (the SQL store's CompleteTx) and
// its commit: a store that hangs then cannot hold the request past the
// time another may take its key. The bound follows the lease as it is
// renewed: the context ends, with [context.DeadlineExceeded], only when
// the lease as last renewed runs out ([Claim.LeaseDeadline] then), and its
// Deadline is the lease's current end (or ctx's, if earlier). So it can be
// taken as the handler begins, before slow work: a handler slower than the
// lease keeps its transaction while the lease is renewed. Once the claim
// is completed ([Claim.Completed]) the lease is no longer renewed, so the
// commit must end within the lease as it then stands. Call the returned
// cancel when done, as with [context.WithDeadline].
func (c *Claim) WithLeaseDeadline(ctx context.Context) (context.Context, context.CancelFunc) {
	if c.LeaseDeadline().IsZero() {
		return context.WithCancel(ctx)
	}
	inner, cancel := context.WithCancelCause(ctx)
	go func() { // ends the context when the lease, as renewed, runs out
		for {
			d := c.left()
			if d <= 0 {
				cancel(context.DeadlineExceeded)
				return
			}
			t := time.NewTimer(d)
			select {
			case <-inner.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
	}()
	return &leaseCtx{Context: inner, c: c}, func() { cancel(context.Canceled) }
}

// leaseCtx is a context whose deadline is its claim's lease, as renewed.
type leaseCtx struct {
	context.Context
	c *Claim
}

func (l *leaseCtx) Deadline() (time.Time, bool) {
	d := l.c.LeaseDeadline()
	if pd, ok := l.Context.Deadline(); ok && pd.Before(d) {
		return pd, true
	}
	return d, true
}

func (l *leaseCtx) Err() error {
	err := l.Context.Err()
	if err != nil && errors.Is(context.Cause(l.Context), context.DeadlineExceeded) {
		return context.DeadlineExceeded
	}
	return err
}

// hold starts renewing the lease of a claim that Begin got, asked of the
// store at asked, with ctx as the request's.
func (c *Claim) hold(ctx context.Context, asked monotime.Reading) {
	c.ctx, c.cancel = context.WithCancelCause(context.WithValue(ctx, claimKey{}, c))
	c.held.Store(leaseEnd(asked, c.guard.cfg.lease))
	c.guard.inflight.Store(c.Key, c)
	c.stop = c.guard.renew(ctx, c)
}

// end ends the request's run once: it cancels its context. The lease is
// still renewed until finish, so that the result can be saved. ok is false
// if the claim had ended, or is not Begin's.
func (c *Claim) end() (ok bool) {
	if c.guard == nil || c.stop == nil || !c.ended.CompareAndSwap(false, true) {
		return false
	}
	c.cancel(nil)
	return true
}

// finish stops the renewals of an ended claim and forgets it.
func (c *Claim) finish() {
	c.stop()
	c.guard.inflight.CompareAndDelete(c.Key, c)
	if c.leftOnStore.Load() {
		c.guard.orphan(c.Key, c.Record) // the request has ended: the claim the store may write at its thaw is an orphan now (review168)
	}
}

// on returns the store c is claimed on.
func (c *Claim) on() Store {
	if c.local.Load() {
		return c.guard.local
	}
	return c.guard.store
}

// heldUntil returns when the lease as last granted runs out.
func (c *Claim) heldUntil() monotime.Reading { return monotime.Reading(c.held.Load()) }

// left returns how long the lease as last granted has left to run, 0 or
// less once it has run out.
func (c *Claim) left() time.Duration {
	end, now := c.heldUntil(), monotime.Now()
	d := end - now
	switch {
	case now < 0 && d < end: // overflowed: a Lease of centuries
		return math.MaxInt64
	case now > 0 && d > end:
		return math.MinInt64
	}
	return time.Duration(d)
}

// leaseEnd is when a lease granted at start runs out, as a monotonic
// reading: the latest one for a lease that runs out later (a Lease of
// centuries), not one that overflowed into the past.
func leaseEnd(start monotime.Reading, lease time.Duration) int64 {
	if end := start + monotime.Reading(lease); end >= start {
		return int64(end)
	}
	return math.MaxInt64
}

// renew renews c's lease every third of it until the returned stop is
// called, which waits for it.
func (g *Guard) renew(ctx context.Context, c *Claim) (stop func()) {
	done := make(chan struct{})
	exited := make(chan struct{})
	c.keeping.Store(true)
	go func() {
		defer close(exited)
		defer c.keeping.Store(false)
		g.keep(ctx, c, done)
	}()
	return sync.OnceFunc(func() {
		close(done)
		<-exited
	})
}

// keep renews c's lease every third of it until done is closed, and soon
// again when a renewal fails, until the lease runs out. If the lease is
// lost, it reports it, cancels the request's context and marks c lost.
func (g *Guard) keep(ctx context.Context, c *Claim, done <-chan struct{}) {
	wait := g.cfg.lease / 3
	var failing monotime.Reading // the first of the renewals failed in a row
	failed := false
	for {
		t := time.NewTimer(wait)
		select {
		case <-done:
			t.Stop()
			return
		case <-t.C:
		}
		if c.completed.Load() {
			return // stored by the handler itself: nothing to hold
		}
		start := monotime.Now()
		err := g.renewOnce(ctx, c)
		if err == nil || errors.Is(err, ErrNotOwner) {
			failed = false
		} else if !failed {
			failing, failed = start, true
		}
		switch {
		case err == nil:
			c.held.Store(leaseEnd(start, g.cfg.lease))
			wait = g.cfg.lease / 3
			continue
		case errors.Is(err, ErrNotOwner) && c.completed.Load():
			return // completed in the handler's transaction meanwhile
		case errors.Is(err, ErrNotOwner):
		case c.left() > 0:
			g.report(resilience.EventStoreFailed, c.Key, err)
			wait = min(g.cfg.lease/12, g.cfg.storeTimeout/2, max(c.left()/2, time.Millisecond)) // try again soon
			continue
		case g.moveLocal(c, time.Duration(monotime.Now()-failing)):
			g.report(resilience.EventStoreFailed, c.Key, fmt.Errorf("renewal failed until the lease ran out, the guard failed open: the request goes on, held in this process's records: %w", err))
			wait = g.cfg.lease / 3
			continue
		default:
			err = fmt.Errorf("%w: renewal failed until it ran out: %w", ErrLeaseLost, err)
		}
		c.lost.Store(true)
		g.report(resilience.EventLeaseLost, c.Key, err)
		c.cancel(ErrLeaseLost)
		return
	}
}

// keepLocal keeps a copy of done, the record of c saved on the store
// while the guard has failed open (its repeats to this process are claimed
// on its local records meanwhile), or that the store would not save, in
// the guard's local records: its repeats to this process are to be
// replayed, not run again.
func (g *Guard) keepLocal(c *Claim, done Record) {
	if g.local == nil || c.local.Load() {
		return
	}
	ctx, cancel := g.storeCtx(context.Background())
	defer cancel()
	if g.takeLocal(ctx, c) {
		_ = g.local.Complete(ctx, c.Key, c.Record, done, g.cfg.ttl)
	}
}

// moveLocal moves a claim on the store whose lease ran out, its renewals
// failing for failing, to the guard's local records if the guard has
// failed open or the renewals have failed for [FailOpenAfter]: the store
// is then down for this request, as for a new one, which would run on the
// local records; so it goes on, rather than be canceled. It reports
// whether it did.
func (g *Guard) moveLocal(c *Claim, failing time.Duration) bool {
	if g.local == nil || c.local.Load() || !g.out.isOpen() && (g.cfg.failOpen < 0 || failing < g.cfg.failOpen) {
		return false
	}
	start := monotime.Now()
	ctx, cancel := g.storeCtx(context.Background())
	defer cancel()
	if !g.takeLocal(ctx, c) {
		return false
	}
	c.held.Store(leaseEnd(start, g.cfg.lease))
	c.local.Store(true)
	return true
}

// takeLocal claims c's key, with c's claim, on the guard's local records,
// and reports whether it got it.
func (g *Guard) takeLocal(ctx context.Context, c *Claim) bool {
	found, err := g.local.Begin(ctx, c.Key, c.Record, g.cfg.lease)
	if err != nil || found != nil {
		return false
	}
	g.usedLocal.Store(true)
	return true
}

// renewOnce renews c's lease, bounded by what is left of it, so that a
// slow call leaves time for another try before it runs out. A claim that
// the store no longer has (it restarted without persistence, or the lease
// ran out while this process was paused) is taken again if the key is
// free, so that a repeat cannot run meanwhile; ErrNotOwner if another
// request holds it.
func (g *Guard) renewOnce(ctx context.Context, c *Claim) error {
	d := min(g.cfg.storeTimeout, c.left())
	if d <= 0 {
		d = g.cfg.storeTimeout // this process was paused past the lease: try to take the key again
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d)
	defer cancel()
	err := c.on().Renew(ctx, c.Key, c.Record, g.cfg.lease)
	if !errors.Is(err, ErrNotOwner) {
		return err
	}
	found, err := c.on().Begin(ctx, c.Key, c.Record, g.cfg.lease)
	switch {
	case err != nil:
		return err
	case found == nil, found.Token == c.Record.Token:
		return nil // taken again, or still ours, or its result saved meanwhile
	}
	return ErrNotOwner
}

// complete stores result under c's key, retried with backoff while c's
// lease can be renewed; a failure is reported.
func (g *Guard) complete(ctx context.Context, c *Claim, result Record, failed func()) error {
	done := c.Completion(result)
	delay := g.cfg.storeTimeout / 5
	budget := monotime.Reading(leaseEnd(monotime.Now(), g.cfg.lease)) // one lease of failed saves while the renewals get through
	var err error
	for {
		err = g.saveOnce(ctx, c, done)
		if err == nil && g.out.isOpen() {
			g.keepLocal(c, done)
		}
		if err == nil || errors.Is(err, ErrNotOwner) {
			break
		}
		if failed != nil {
			failed()
			failed = nil
		}
		if c.lost.Load() || monotime.Now() >= budget {
			break // another request may take the key, or a lease of saves failed
		}
		if !g.awaitNextSave(c, delay) {
			break // the lease ran out, not renewed: another request may take the key
		}
		delay = min(2*delay, g.cfg.lease/12, 2*g.cfg.storeTimeout)
	}
	if errors.Is(err, ErrNotOwner) {
		err = fmt.Errorf("%w: another request holds the key", ErrLeaseLost)
	}
	if err != nil {
		// The claim stays until its lease runs out: repeats are refused as
		// in progress until then rather than a second run while this one's
		// effect may stand. The guard keeps the result on its own
		// records: its repeats to this process are replayed, not run again
		// once the lease has run out (review151, review152: a Redis out of
		// memory refused the save for a lease, and the repeat ran again,
		// the guard failed open then or later).
		if !errors.Is(err, ErrLeaseLost) {
			g.keepLocal(c, done)
		}
		g.report(resilience.EventNotStored, c.Key, err)
	}
	return err
}

// awaitNextSave waits before the next try to save c's result: delay, but
// no later than when the lease left covers just one store timeout, so that
// the last try can end before the lease runs out. With less left than
// that, it waits for a renewal (which goes on meanwhile) until the lease
// runs out. It returns false if the lease ran out without being renewed,
// or was lost.
func (g *Guard) awaitNextSave(c *Claim, delay time.Duration) bool {
	for {
		if c.lost.Load() {
			return false
		}
		left := c.left()
		if left <= 0 && !c.local.Load() && g.local != nil && c.keeping.Load() {
			time.Sleep(delay) // the renewals move the claim to the local records (moveLocal), or lose it
			continue
		}
		if left <= 0 {
			return false
		}
		if last := left - g.cfg.storeTimeout; last > 0 {
			time.Sleep(min(delay, last)) // the last try with a store timeout of lease left
			return true
		}
		held := c.held.Load()
		time.Sleep(min(left, delay)) // too little left for a save: wait for a renewal
		if c.held.Load() != held && c.left() > 0 {
			return true // renewed: try again
		}
	}
}

// saveOnce stores done under c's key. If the key does not hold c's claim,
// it finds out why: an earlier try got through and its answer did not (the
// record is c's), or the store lost the claim and the key is free (it is
// taken again and the record stored), or another request holds it
// (ErrNotOwner).
func (g *Guard) saveOnce(ctx context.Context, c *Claim, done Record) error {
	sctx, cancel := g.storeCtx(ctx)
	defer cancel()
	err := c.on().Complete(sctx, c.Key, c.Record, done, g.cfg.ttl)
	if !errors.Is(err, ErrNotOwner) {
		return err
	}
	found, err := c.on().Begin(sctx, c.Key, c.Record, g.cfg.lease)
	switch {
	case err != nil:
		return err
	case found == nil:
		return c.on().Complete(sctx, c.Key, c.Record, done, g.cfg.ttl) // taken again
	case found.Done && found.Token == c.Record.Token:
		return nil // stored already
	case !found.Done && found.Token == c.Record.Token:
		return errors.New("idempotency: claim held but not completed") // try again
	}
	return ErrNotOwner
}

// release frees c's key, retried; a failure is reported. failed, if not
// nil, is called once a first try has failed.
func (g *Guard) release(ctx context.Context, c *Claim, failed func()) error {
	err := g.retry(ctx, func(sctx context.Context) error {
		err := c.on().Release(sctx, c.Key, c.Record)
		if err != nil && failed != nil {
			failed()
			failed = nil
		}
		return err
	})
	if err != nil && !errors.Is(err, ErrNotOwner) {
		g.report(resilience.EventStoreFailed, c.Key, err)
		return err
	}
	return nil
}

// retry calls op on the store a few times within a bound, each call
// bounded by the store timeout; a lost claim is not retried.
func (g *Guard) retry(ctx context.Context, op func(ctx context.Context) error) error {
	p := retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(g.cfg.storeTimeout/5),
		retrypolicy.RetryIf(func(err error) bool { return !errors.Is(err, ErrNotOwner) }))
	bound, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(g.cfg.storeTimeout, math.MaxInt64/4)*4)
	defer cancel()
	_, err := retrypolicy.Do(bound, p, func(context.Context) (struct{}, error) {
		sctx, cancel := g.storeCtx(ctx)
		defer cancel()
		return struct{}{}, op(sctx)
	})
	return err
}

// storeCtx bounds one store call. It outlives ctx's cancellation: the
// store is written even if the client has gone, since that is when the
// stored result matters most.
func (g *Guard) storeCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), g.cfg.storeTimeout)
}

// orphans are claims that Begins of this guard may have left, by key and
// token (a key's client may retry, and its Begins time out, more than
// once): at most maxOrphans, the oldest forgotten (their leases free them
// anyway). Safe for concurrent use.
type orphans struct {
	mu      sync.Mutex
	claims  map[orphan]*noted
	order   []orphan
	reaping bool // timers free them (Guard.reap)
}

// orphan is a claim's key and token.
type orphan struct{ key, token string }

// noted is a claim an orphan is of, when the reaping tries to free it
// next, how long it waits after that, and when the claim's lease could
// have run out, after which the reaping leaves it: no later than last,
// however long the store fails.
type noted struct {
	claim       Record
	next        time.Time
	wait        time.Duration
	until, last time.Time
}

// reapLeases is for how many leases after a Begin gave up on its claim
// the reaping may try to free it, while the store fails: a store frozen
// longer may write the claim at its thaw with no one left to free it,
// and the claim's lease frees it then.
const reapLeases = 10

const maxOrphans = 1024

// add notes a claim, to be tried from first on, wait after that (see
// tried) until until (or last, see failed), and reports whether the
// reaping must start (it has not).
func (o *orphans) add(key string, claim Record, first time.Time, wait time.Duration, until, last time.Time) (reap bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.claims == nil {
		o.claims = make(map[orphan]*noted)
	}
	id := orphan{key, claim.Token}
	if _, ok := o.claims[id]; !ok {
		o.order = append(o.order, id)
	}
	o.claims[id] = &noted{claim: claim, next: first, wait: wait, until: until, last: last}
	for len(o.order) > maxOrphans {
		delete(o.claims, o.order[0])
		o.order = o.order[1:]
	}
	reap, o.reaping = !o.reaping, true
	return reap
}

// due returns the claims noted that are due at now, whose leases may not
// have run out, and reports whether any such claim is left to try; if
// none is, it stops the reaping (those left stay noted, for the next
// Begin of their keys).
func (o *orphans) due(now time.Time) (due map[orphan]Record, more bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for id, n := range o.claims {
		if !now.Before(n.until) {
			continue
		}
		more = true
		if now.Before(n.next) {
			continue
		}
		if due == nil {
			due = make(map[orphan]Record)
		}
		due[id] = n.claim
	}
	if !more {
		o.reaping = false
	}
	return due, more
}

// tried notes that the reaping tries to free the claim of id at now: its
// next try waits, and the one after twice as long, up to most.
func (o *orphans) tried(id orphan, now time.Time, most time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if n, ok := o.claims[id]; ok {
		n.next, n.wait = now.Add(n.wait), min(2*n.wait, most)
	}
}

// failed notes that the store failed: a claim that a frozen store still
// holds in a connection may be written once it thaws, with a lease from
// then, so none of those noted is left before until, or its last.
func (o *orphans) failed(until time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, n := range o.claims {
		u := until
		if u.After(n.last) {
			u = n.last
		}
		if u.After(n.until) {
			n.until = u
		}
	}
}

// stop stops the reaping.
func (o *orphans) stop() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.reaping = false
}

// take forgets and returns the claim noted of key with token, if any.
func (o *orphans) take(key, token string) (Record, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	id := orphan{key, token}
	n, ok := o.claims[id]
	if !ok {
		return Record{}, false
	}
	delete(o.claims, id)
	o.order = slices.DeleteFunc(o.order, func(k orphan) bool { return k == id })
	return n.claim, true
}

// orphan notes a claim that a Begin of g gave up on, and starts the
// reaping if it has not.
func (g *Guard) orphan(key string, claim Record) {
	now := time.Now()
	if g.orphans.add(key, claim, now.Add(g.cfg.storeTimeout), g.cfg.storeTimeout, now.Add(g.cfg.lease), now.Add(reapLeases*min(g.cfg.lease, math.MaxInt64/reapLeases))) {
		time.AfterFunc(g.cfg.storeTimeout, g.reap)
	}
}

// reap frees the claims that Begins of g gave up on, on timers (no
// goroutine waits between them): a Begin whose answer came after the
// store timeout leaves a claim that holds its key, which the other
// replicas cannot free, for a whole lease, and a store that froze as it
// was asked may write it only once it thaws. Each claim is tried a store
// timeout after its Begin gave up, and then again, each wait twice the
// last up to a twelfth of the lease, until the claim's lease could have
// run out, counted from the store's last failure (a claim sent to a
// frozen store is written when it thaws, with a lease from then:
// review165), reapLeases leases at most; those it cannot free (the store
// still fails, or the claim is not written yet: ErrNotOwner) are tried
// again, and after that left to g's next Begin of their keys, which frees
// them, or to their leases.
func (g *Guard) reap() {
	defer func() {
		if r := recover(); r != nil { // the store's: on no request's goroutine, so not to end the process
			g.orphans.stop()
			g.cfg.logger().Error("idempotency: the store panicked freeing a claim a Begin gave up on", "panic", r)
		}
	}()
	claims, more := g.orphans.due(time.Now())
	if !more {
		return
	}
	for id, claim := range claims {
		g.orphans.tried(id, time.Now(), max(g.cfg.lease/12, g.cfg.storeTimeout))
		ctx, cancel := g.storeCtx(context.Background())
		err := g.store.Release(ctx, id.key, claim)
		cancel()
		if err == nil {
			g.orphans.take(id.key, id.token)
		} else if !errors.Is(err, ErrNotOwner) {
			g.orphans.failed(time.Now().Add(g.cfg.lease))
			break // the store fails: the others are tried next round, not a store timeout each in turn now
		}
	}
	time.AfterFunc(g.cfg.storeTimeout, g.reap)
}
