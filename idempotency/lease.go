package idempotency

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

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

	abandoned, completed, ended atomic.Bool

	guard  *Guard
	ctx    context.Context
	cancel context.CancelCauseFunc
	stop   func() (lost bool)
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
// (its Status, Header, Body and Truncated) under the key for [TTL], for
// repeats to replay; a body over [MaxResponse] is stored as Truncated, not
// replayable. It frees the key instead, as [Claim.Release] does, if the
// claim was abandoned, if result.Status is one of [ReleaseStatus], or if
// the caller has gone and result.Status is 0 or 5xx. If the handler
// completed the claim itself ([Claim.Completed]) and did not abandon it,
// Complete neither stores nor frees anything, whatever the status and ctx.
//
// The caller has gone if ctx was done when Complete was called. ctx may be
// the claim's own context ([Claim.Context]) or one made from it: its being
// canceled as Complete ends the claim, or for a lost lease, is not the
// caller leaving.
//
// It returns [ErrLeaseLost] if the lease was lost, and the store's error
// if the result could not be stored, having reported either; the key then
// stays claimed until its lease runs out. The store is written even if
// ctx is canceled, each call bounded by [StoreTimeout] and retried within
// four of them. After the claim has ended, Complete does nothing and
// returns nil.
func (c *Claim) Complete(ctx context.Context, result Record) error {
	gone := callerGone(ctx) // before end cancels the claim's context, which ctx may be
	lost, ok := c.end()
	if !ok {
		return nil
	}
	g := c.guard
	switch {
	case c.abandoned.Load():
		return g.release(ctx, c) // nothing committed; a record the handler did commit is no claim, and stays
	case c.completed.Load():
		return nil // committed by the handler with its effect: never freed
	case g.cfg.release[result.Status] || (gone && (result.Status == 0 || result.Status >= 500)):
		return g.release(ctx, c) // nothing committed, or the client is told to retry
	case lost:
		g.report(resilience.EventNotStored, c.Key, ErrLeaseLost)
		return ErrLeaseLost
	}
	return g.complete(ctx, c, result)
}

// Release ends the claim by freeing its key, so that a retry runs the
// request again: for a request that committed nothing, or panicked. A
// failure is reported and returned, and the key then stays claimed until
// its lease runs out; a key that the claim no longer holds is no failure.
// After the claim has ended, Release does nothing and returns nil, so that
// a deferred Release frees the key of a request that panicked and only
// that. Of a claim that the handler completed itself ([Claim.Completed])
// and did not abandon, Release frees nothing: it only ends the claim.
func (c *Claim) Release(ctx context.Context) error {
	if _, ok := c.end(); !ok {
		return nil
	}
	if c.completed.Load() && !c.abandoned.Load() {
		return nil // committed by the handler with its effect: never freed
	}
	return c.guard.release(ctx, c)
}

// callerGone reports whether ctx, a caller's context, is done because the
// caller has gone: a context canceled for a lost lease (the claim's own, or
// one made from it) is not.
func callerGone(ctx context.Context) bool {
	return ctx.Err() != nil && !errors.Is(context.Cause(ctx), ErrLeaseLost)
}

// hold starts renewing the lease of a claim that Begin got, with ctx as
// the request's.
func (c *Claim) hold(ctx context.Context) {
	c.ctx, c.cancel = context.WithCancelCause(context.WithValue(ctx, claimKey{}, c))
	c.stop = c.guard.renew(ctx, c)
}

// end ends the claim once: it stops the renewals and cancels the request's
// context. ok is false if the claim had ended, or is not Begin's.
func (c *Claim) end() (lost, ok bool) {
	if c.guard == nil || c.stop == nil || !c.ended.CompareAndSwap(false, true) {
		return false, false
	}
	lost = c.stop()
	c.cancel(nil)
	return lost, true
}

// renew renews c's lease every third of it until the returned stop is
// called, which waits for it and reports whether the lease was lost.
func (g *Guard) renew(ctx context.Context, c *Claim) (stop func() (lost bool)) {
	done := make(chan struct{})
	exited := make(chan bool, 1)
	go func() { exited <- g.keep(ctx, c, done) }()
	return sync.OnceValue(func() bool {
		close(done)
		return <-exited
	})
}

// keep renews c's lease every third of it until done is closed. If the
// lease is lost, it reports it, cancels the request's context and returns
// true.
func (g *Guard) keep(ctx context.Context, c *Claim, done <-chan struct{}) (lost bool) {
	held := time.Now().Add(g.cfg.lease)
	wait := g.cfg.lease / 3
	for {
		t := time.NewTimer(wait)
		select {
		case <-done:
			t.Stop()
			return false
		case <-t.C:
		}
		if c.completed.Load() {
			return false // stored by the handler itself: nothing to hold
		}
		start := time.Now()
		err := g.renewOnce(ctx, c, held)
		switch {
		case err == nil:
			held, wait = start.Add(g.cfg.lease), g.cfg.lease/3
			continue
		case errors.Is(err, ErrNotOwner) && c.completed.Load():
			return false // completed in the handler's transaction meanwhile
		case errors.Is(err, ErrNotOwner):
		case time.Now().Before(held):
			g.report(resilience.EventStoreFailed, c.Key, err)
			wait = min(g.cfg.lease/12, max(time.Until(held)/2, time.Millisecond)) // try again soon
			continue
		default:
			err = fmt.Errorf("%w: renewal failed until it ran out: %w", ErrLeaseLost, err)
		}
		g.report(resilience.EventLeaseLost, c.Key, err)
		c.cancel(ErrLeaseLost)
		return true
	}
}

// renewOnce renews c's lease, bounded by what is left of it (until held),
// so that a slow call leaves time for another try before it runs out.
func (g *Guard) renewOnce(ctx context.Context, c *Claim, held time.Time) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(g.cfg.storeTimeout, max(time.Until(held), 0)))
	defer cancel()
	return g.store.Renew(ctx, c.Key, c.Record, g.cfg.lease)
}

// complete stores result under c's key, retried; a failure is reported.
func (g *Guard) complete(ctx context.Context, c *Claim, result Record) error {
	done := Record{
		Fingerprint: c.Record.Fingerprint,
		Done:        true,
		Status:      result.Status,
		Header:      result.Header,
		Body:        result.Body,
		Truncated:   result.Truncated,
	}
	if len(done.Body) > g.cfg.maxResponse {
		done.Body, done.Truncated = nil, true
	}
	tried := false
	err := g.retry(ctx, func(sctx context.Context) error {
		err := g.store.Complete(sctx, c.Key, c.Record, done, g.cfg.ttl)
		if errors.Is(err, ErrNotOwner) && tried && g.storedAlready(ctx, c) {
			return nil // an earlier try got through, its answer did not
		}
		tried = true
		return err
	})
	if err != nil {
		// The claim stays until its lease runs out: repeats are refused as
		// in progress until then rather than a second run while this one's
		// effect may stand.
		g.report(resilience.EventNotStored, c.Key, err)
	}
	return err
}

// storedAlready reports whether c's key holds a completed record of c's
// request: a Complete whose answer was lost got through. Looking claims
// the key if it is free, and frees it again.
func (g *Guard) storedAlready(ctx context.Context, c *Claim) bool {
	ctx, cancel := g.storeCtx(ctx)
	defer cancel()
	look := Record{Fingerprint: c.Record.Fingerprint, Token: rand.Text()}
	found, err := g.store.Begin(ctx, c.Key, look, g.cfg.lease)
	if err == nil && found == nil {
		_ = g.store.Release(ctx, c.Key, look)
	}
	return err == nil && found != nil && found.Done && found.Fingerprint == c.Record.Fingerprint
}

// release frees c's key, retried; a failure is reported.
func (g *Guard) release(ctx context.Context, c *Claim) error {
	err := g.retry(ctx, func(sctx context.Context) error { return g.store.Release(sctx, c.Key, c.Record) })
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
	bound, cancel := context.WithTimeout(context.WithoutCancel(ctx), 4*g.cfg.storeTimeout)
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

// orphans are claims that Begins of this guard may have left: at most
// maxOrphans, the oldest forgotten (their leases free them anyway). Safe
// for concurrent use.
type orphans struct {
	mu     sync.Mutex
	claims map[string]Record
	order  []string
}

const maxOrphans = 1024

func (o *orphans) add(key string, claim Record) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.claims == nil {
		o.claims = make(map[string]Record)
	}
	if _, ok := o.claims[key]; !ok {
		o.order = append(o.order, key)
	}
	o.claims[key] = claim
	for len(o.order) > maxOrphans {
		delete(o.claims, o.order[0])
		o.order = o.order[1:]
	}
}

func (o *orphans) take(key string) (Record, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	c, ok := o.claims[key]
	if ok {
		delete(o.claims, key)
		o.order = slices.DeleteFunc(o.order, func(k string) bool { return k == key })
	}
	return c, ok
}
