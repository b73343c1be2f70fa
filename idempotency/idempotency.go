// Package idempotency makes retried writes safe on the server side, by
// the Idempotency-Key header of the IETF httpapi draft, as Stripe does.
//
// A client sends the same unique key on every attempt of one logical
// request. The first request with a key runs the handler; its result is
// stored under the key. A repeat with the same key and the same payload
// gets that result replayed without running the handler again, so a POST
// whose response was lost can be retried without creating a second order.
// A repeat that arrives while the first is still running is refused as in
// progress; one whose payload differs (fingerprinted) is refused as a key
// reused. Keys are scoped by who the caller is ([Scope]), so one caller
// never sees another's result; the middleware does not guess it from a
// header, and panics unless given [Scope] or [SharedKeys]; a keyed
// request whose Scope is "" is refused (401), never put in a shared
// namespace.
//
// The first request holds its key by a lease, not a lock: a claim lasts
// [Lease] (30 s by default) and is renewed while the handler runs and
// while its result is saved, so a slow handler keeps its key, a store
// outage shorter than what is left of the lease never runs a request
// twice, and a crashed process's key is free again one lease later. Each
// claim has a token, and a store completes, renews or releases a claim
// only for the holder of its token (a fencing token), so a request that
// lost its lease cannot overwrite the one that took the key over: it
// learns that it lost it (an event, a log line, and its context
// canceled).
//
// What is stored: every result, errors included (the draft's rule: the
// stored result is replayed, success or error), whether or not the caller
// is still there, except that the key is freed, so that a retry runs the
// handler again, only when the request says that it committed nothing:
//   - the status asks the client to retry because the request was not
//     processed (429, 502, 503, 504; see [ReleaseStatus]): a handler that
//     stops for its canceled context before committing answers 503;
//   - the handler said so ([Claim.Abandon]);
//   - the handler panicked before it wrote a status (after one, a 500 is
//     stored).
//
// A response that did not reach its caller whole (cut short mid-stream,
// flushed or not, shorter than its Content-Length, or nothing written when
// the caller left) is stored as incomplete: a
// repeat gets [ErrIncomplete] (500 over HTTP), neither a partial replay
// nor a second run. A result that the handler stored itself, in its own
// transaction ([Claim.Completed]), is never freed, whatever its status.
//
// Nothing is dropped silently: a store that fails gets the request
// refused (and an event), saving the result is retried while the lease
// can be renewed, and a result that still could not be saved is reported
// ([resilience.EventNotStored]) while the key stays claimed until its
// lease runs out. A store that has been failing for [FailOpenAfter]
// (10 s by default) no longer fails requests: they run on this process's
// own records until it answers again, at most once per process.
//
// The middleware sends a response once it is saved (or its key freed),
// within the handler, so that a graceful shutdown (http.Server.Shutdown)
// waits for the store; but a store slow to answer holds up a short
// response for one [StoreTimeout] at most, not for the whole lease that
// the save may be retried in: once a first try has failed, the response
// goes out whole, its Content-Length set, and over HTTP/1 with
// "Connection: close" (the connection is busy until the save ends),
// while the save is tried again. Short means what net/http holds itself
// until the handler returns: a body of up to 2 KiB over HTTP/1 (4 KiB
// over HTTP/2), not flushed, whose length and framing (Content-Length,
// Transfer-Encoding, Trailer) the handler leaves to net/http. A longer
// one has gone out in part as the handler wrote it, as without the
// middleware, and its end waits for the save. Over HTTP/2 the stream
// ends when the handler returns: a client that reads the body to its end
// waits for the save there; one that reads Content-Length bytes does
// not. Behind an outer ResponseWriter that cannot flush (one with neither
// Flush nor Unwrap), nothing goes out before the handler returns.
//
// The model knows no transport: a [Guard] claims keys, holds their leases,
// and stores and replays results as opaque [Record] values. [Middleware]
// puts it in front of an HTTP handler (409 for a request in progress, 422
// for a key reused, 400 for a missing key on a route that requires one,
// replays marked Idempotent-Replayed: true), and package grpcidempotency
// in front of gRPC unary calls.
//
// A [Store] holds the records: [MemoryStore] for one process, Redis (module
// github.com/resiliencekit/resiliencekit/redis) for replicas, or SQL
// (module .../resiliencekit/sql), whose completion can be written in the
// handler's own transaction for exactly-once effects. docs/idempotency.md
// says what each survives.
package idempotency

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/resiliencekit/resiliencekit/internal/monotime"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// ErrInProgress is returned by [Guard.Begin] for a key whose first request
// still runs: the repeat may try again later.
var ErrInProgress = errors.New("idempotency key in use by a request in progress")

// ErrKeyReused is returned by [Guard.Begin] for a key that was used for a
// request with another fingerprint.
var ErrKeyReused = errors.New("idempotency key reused for a different request")

// ErrNotReplayable is returned by [Guard.Begin] for a key whose result was
// too large to store whole (see [MaxResponse]): it cannot be replayed, and
// the request is not run again.
var ErrNotReplayable = errors.New("result under idempotency key too large to replay")

// ErrIncomplete is returned by [Guard.Begin] for a key whose request ran
// but whose result was not recorded whole: its client left mid-stream, or
// before anything was written. It is not replayed as if complete, and the
// request is not run again.
var ErrIncomplete = errors.New("result under idempotency key incomplete: its client left before it was sent")

// Guard runs requests at most once per key, whatever their transport:
// [Guard.Begin] claims a key and holds it by a renewed lease,
// [Claim.Complete] stores the request's result under it for repeats to
// replay, and [Claim.Release] frees it for a retry. A result is an opaque
// [Record] (a status, headers and a body) that the transport fills and
// reads. A Guard is safe for concurrent use; the zero value is not usable,
// call [NewGuard].
type Guard struct {
	store     Store
	local     *MemoryStore // the records a request is kept on once the store has failed for FailOpenAfter; nil if none
	usedLocal atomic.Bool  // a request was claimed on local: its repeats are answered from there
	refusing  atomic.Bool  // the store's last failure was a refusal to write (ErrWritesRefused): it still reads
	asking    atomic.Bool  // the store failed and the guard has not failed open: it asks the store once a probeEvery (ask)
	out       outage
	cfg       config
	orphans   orphans
	inflight  sync.Map // scoped key -> *Claim held by this guard, until its result is saved
}

// NewGuard returns a Guard that keeps its records in store; a nil store
// means a [MemoryStore] of default size. It takes the options [TTL],
// [Lease], [StoreTimeout], [FailOpenAfter], [MaxResponse],
// [ReleaseStatus], [WithListener] and [WithLogger]. It panics if the
// lease is under three store timeouts, or names the option if given one
// of [Middleware]'s ([Required],
// [Methods], [MaxBody], [Scope], [SharedKeys], [ReplayExclude]), which
// would have no effect: a Guard's caller, such as package grpcidempotency,
// has its own.
func NewGuard(store Store, opts ...Option) *Guard {
	cfg := newConfig(opts)
	cfg.guardOnly()
	return newGuard(store, cfg)
}

// newGuard returns a Guard of cfg that keeps its records in store, a nil
// store meaning a [MemoryStore] of default size.
func newGuard(store Store, cfg config) *Guard {
	if store == nil {
		store = NewMemoryStore(0)
	}
	g := &Guard{store: store, cfg: cfg}
	if _, mem := store.(*MemoryStore); !mem && cfg.failOpen >= 0 {
		g.local = NewMemoryStore(0)
	}
	return g
}

// Begin claims key, in the namespace of scope (the caller, so that two
// callers' keys never collide), for a request whose payload has the given
// fingerprint (a digest, such as a SHA-256 in hex). It returns one of
//   - a claim: the request is the key's first and is to run, under
//     [Claim.Context], its lease renewed until it ends by [Claim.Complete]
//     or [Claim.Release], one of which must be called;
//   - the stored result of the key's first request, to replay (its Header
//     and Body may be shared with other repeats' and the store's: they are
//     to be read, not modified);
//   - an error: [ErrInProgress], [ErrKeyReused], [ErrNotReplayable],
//     [ErrIncomplete], [ErrFull], or the store's failure, which it
//     reports.
//
// A key that this guard holds itself is refused without asking the store
// (ErrInProgress, or ErrKeyReused for another fingerprint), so repeats on
// the holder's replica get ErrInProgress even while the store is down. A
// Begin for a key that another Begin of this guard is claiming at that
// moment waits for that one's answer, or for ctx to end (its error then),
// and gives its own from it, by its own fingerprint: from the record the
// other found (to replay, or ErrInProgress, ErrKeyReused...), from the
// other's claim (ErrInProgress, or ErrKeyReused), or the store's failure
// (a store that panicked too: an error, not a try of its own). So a
// process never claims one key twice at once (on the store and on its
// local records, see [FailOpenAfter]), and simultaneous repeats of a
// request that has ended are all replayed, not refused.
//
// key is a key as idempotencykey.Parse gives it (1 to 255 bytes of
// printable ASCII), which the HTTP and gRPC servers check before they call
// Begin: a store may refuse another (PostgreSQL a NUL byte, an invalid
// UTF-8 byte or a key over about 8 KB), and its refusal is then a store
// failure. Each store call is bounded by [StoreTimeout], whether or not
// ctx is canceled. Begin is safe for concurrent use.
func (g *Guard) Begin(ctx context.Context, scope, key, fingerprint string) (*Claim, *Record, error) {
	c := &Claim{Key: scopeKey(scope, key), Record: Record{Fingerprint: fingerprint, Token: rand.Text()}, TTL: g.cfg.ttl, guard: g, settled: make(chan struct{})}
	// Held or being claimed here: no need to ask the store, which may be
	// down, and no second claim of the key by this process, on the store or
	// on its local records.
	if v, busy := g.inflight.LoadOrStore(c.Key, c); busy {
		other := v.(*Claim)
		select {
		case <-other.settled: // soon: the other's store calls are bounded
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
		switch {
		case other.err != nil:
			return nil, nil, other.err
		case !other.claimed:
			found := other.found // the other's caller may change its own
			stored, err := replayable(&found, fingerprint)
			return nil, stored, err
		case other.Record.Fingerprint != fingerprint:
			return nil, nil, ErrKeyReused
		}
		return nil, nil, ErrInProgress
	}
	defer func() {
		if !c.claimed {
			g.inflight.CompareAndDelete(c.Key, c)
			if c.err == nil && !c.seen {
				c.err = errClaimPanicked // the store panicked, or called runtime.Goexit
			}
		}
		close(c.settled)
	}()
	found, asked, err := g.claimOrLocal(ctx, c)
	switch {
	case err != nil:
		c.err = err
		return nil, nil, err
	case found == nil:
		c.hold(ctx, asked)
		c.claimed = true
		return c, nil, nil
	}
	c.found, c.seen = *found, true
	stored, err := replayable(found, fingerprint)
	return nil, stored, err
}

// errClaimPanicked is what the Begins of a key waiting for another Begin
// of the key get if the store panicked as that one asked it: not a second
// try each, one after the other.
var errClaimPanicked = errors.New("idempotency: the store panicked as another request claimed the key")

// replayable returns found, the record that Begin found under a key for
// a request of the given fingerprint, if it is to be replayed, or why
// not.
func replayable(found *Record, fingerprint string) (*Record, error) {
	switch {
	case found.Fingerprint != fingerprint:
		return nil, ErrKeyReused
	case !found.Done:
		return nil, ErrInProgress
	case found.Truncated:
		return nil, ErrNotReplayable
	case found.Incomplete:
		return nil, ErrIncomplete
	}
	return found, nil
}

// claimOrLocal claims the key of c on the store, or on the guard's local
// records: once the guard has failed open (see outage; one request a
// probeEvery then asks the store, with a claim of its own, whether it is
// back), or for a key that they hold (run meanwhile, so that its repeats to
// this process are answered as its first run was, then and after). Failed
// open on a store that refuses writes but reads (ErrWritesRefused), the
// guard asks the store first, and runs on its local records only a key
// that the store has no record of: a repeat of a key the store holds is
// replayed, or answered as in progress, not run again (review149). A
// store failure is reported.
func (g *Guard) claimOrLocal(ctx context.Context, c *Claim) (*Record, monotime.Reading, error) {
	open := false
	if g.local != nil {
		if g.out.turn() {
			g.probe(ctx)
		}
		if g.usedLocal.Load() && g.local.has(c.Key) {
			return g.claimLocal(ctx, c)
		}
		open = g.out.isOpen()
		if open && !g.refusing.Load() {
			return g.claimLocal(ctx, c)
		}
	}
	found, asked, err := g.claim(ctx, c)
	if err != nil && !errors.Is(err, ErrFull) && !(open && errors.Is(err, ErrWritesRefused)) { // the latter told as the guard failed open
		g.report(resilience.EventStoreFailed, c.Key, err)
	}
	if g.local == nil {
		return found, asked, err
	}
	if err == nil {
		// Failed open, a record found says the store reads, not that it
		// takes claims again: only a claim counts towards its return.
		if !open || found == nil {
			g.storeAnswered()
		}
		return found, asked, nil
	}
	if !g.storeFailed(err, false) {
		return nil, asked, err
	}
	written := !errors.Is(err, ErrWritesRefused) // refused: nothing on the store to free
	found, asked, err = g.claimLocal(ctx, c)
	if err == nil && found == nil && written {
		// The claim the store may still write (as it thaws) is this
		// request's, which now runs here: it holds the key on the store,
		// and is not an orphan to free until the request ends (review167,
		// review168).
		g.orphans.take(c.Key, c.Record.Token)
		c.leftOnStore.Store(true)
	}
	return found, asked, err
}

// storeAnswered notes a call to the store that got through.
func (g *Guard) storeAnswered() {
	if g.out.succeeded() {
		g.report(resilience.EventSharedStateRestored, "", nil)
	}
}

// storeFailed notes a call to the store that failed with err, a probe's
// if probed, and reports whether the guard has failed open. Whether the
// store refuses writes but reads (ErrWritesRefused) is the probes' to
// tell, and the failures of requests before the guard failed open; a
// request's timeout says nothing of it, nor, failed open, a request's
// failure: one slow call among refusals had the guard run the keys the
// store holds again until the next probe (review151, review152). A
// probe's timeout ends it: the store may hang, and the requests, failed
// open, are not to wait on it each (a key it holds asked meanwhile runs
// again, as for any store that does not answer).
func (g *Guard) storeFailed(err error, probed bool) (open bool) {
	switch {
	case errors.Is(err, ErrWritesRefused):
		g.refusing.Store(true)
	case probed: // a timeout too: the store may hang, and requests are not to wait on it each
		g.refusing.Store(false)
	case timedOut(err): // a request's: says nothing of whether the store writes (review152)
	case !g.out.isOpen():
		g.refusing.Store(false)
	}
	open, began := g.out.failed(g.cfg.failOpen)
	if began {
		g.report(resilience.EventSharedStateUnavailable, "", fmt.Errorf("%w: the store failing, keyed requests run on this process's records", err))
	}
	if !open && g.cfg.failOpen > 0 && g.asking.CompareAndSwap(false, true) {
		time.AfterFunc(probeEvery, g.ask)
	}
	return open
}

// ask probes the store, once a probeEvery, from its failure until it
// answers or the guard fails open: so that a store that is down fails the
// guard open after FailOpenAfter however rarely requests come, and a
// transient error, which the next probe finds over, does not add up with
// another long after it into an outage (review116, review149: requests
// ten seconds apart or more were refused for as long as the store was
// down). Requests that come more often count as probes.
// Answers in a row end the run of failures (outage.settled): a failure
// after them begins one of its own (review151, review152: one answer, a
// probe's or a retry's, beside one failed second kept the share at half,
// and a second transient error ten seconds later failed the guard open).
// The guard's probes hold it for as long as they go on: up to
// FailOpenAfter and a few seconds. A store that panics as it is probed
// fails the probe.
func (g *Guard) ask() {
	over := func() bool { return g.out.isOpen() || !g.out.bad.Load() || g.out.settled() }
	if over() {
		g.asking.Store(false)
		// A failure noted since the check found the chain still going, and
		// left the probes to it.
		if over() || !g.asking.CompareAndSwap(false, true) {
			return
		}
	}
	defer time.AfterFunc(probeEvery, g.ask)
	defer func() {
		if r := recover(); r != nil { // on a timer's goroutine: no caller to recover it (review152)
			err := fmt.Errorf("idempotency: the store panicked as it was probed: %v", r)
			g.report(resilience.EventStoreFailed, probeKey, err)
			g.storeFailed(err, true)
		}
	}()
	g.probe(context.Background())
}

// timedOut reports whether err is a call's running out of time, whether
// its context's or the network's.
func timedOut(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// probeKey is the key a guard that failed open claims, and frees, to learn
// whether its store answers, when the request whose turn it is to ask has
// a key of its local records. A scoped key cannot be it (see scopeKey).
const probeKey = "resiliencekit-idempotency-probe"

// probe asks the store for a claim of probeKey, for a lease of one store
// timeout, and notes whether it answered.
func (g *Guard) probe(ctx context.Context) {
	claim := Record{Fingerprint: "probe", Token: rand.Text()}
	sctx, cancel := g.storeCtx(ctx)
	defer cancel()
	found, err := g.store.Begin(sctx, probeKey, claim, g.cfg.storeTimeout)
	if err != nil {
		g.report(resilience.EventStoreFailed, probeKey, err)
		g.storeFailed(err, true)
		return
	}
	if found == nil {
		_ = g.store.Release(sctx, probeKey, claim) // or its lease runs out
	}
	g.storeAnswered()
}

// claimLocal claims the key of c on the guard's local records.
func (g *Guard) claimLocal(ctx context.Context, c *Claim) (*Record, monotime.Reading, error) {
	c.local.Store(true)
	c.madeLocal.Store(true)
	g.usedLocal.Store(true)
	return g.claim(ctx, c)
}

// claim claims the key of c. A claim that an earlier Begin of this guard's
// may have left when its call gave up (the store took it after) is freed
// when it is found, rather than hold its key for a lease.
func (g *Guard) claim(ctx context.Context, c *Claim) (*Record, monotime.Reading, error) {
	for range 2 {
		asked := monotime.Now()         // the store's lease runs from about when it was asked
		sctx, cancel := g.storeCtx(ctx) // a client that leaves does not make the store fail
		found, err := c.on().Begin(sctx, c.Key, c.Record, g.cfg.lease)
		cancel()
		if err != nil {
			if !c.local.Load() && !errors.Is(err, ErrWritesRefused) { // refused: nothing written to free
				g.orphan(c.Key, c.Record)
			}
			return nil, asked, err
		}
		if found == nil || found.Done {
			return found, asked, nil
		}
		orphan, ok := g.orphans.take(c.Key, found.Token) // only when held: no lock on the common path
		if !ok {
			return found, asked, nil
		}
		sctx, cancel = g.storeCtx(ctx)
		err = c.on().Release(sctx, c.Key, orphan)
		cancel()
		if err != nil && !errors.Is(err, ErrNotOwner) {
			g.orphan(c.Key, orphan) // to be tried again
			return found, asked, nil
		}
	}
	return nil, monotime.Now(), errors.New("idempotency: key taken again while freeing an orphan claim")
}

// report sends an event and logs it.
func (g *Guard) report(kind resilience.EventKind, key string, err error) {
	g.cfg.listener.Emit(resilience.Event{Kind: kind, Err: err})
	g.cfg.logger().Warn("idempotency: "+kind.String(), "key", key, "error", err)
}
