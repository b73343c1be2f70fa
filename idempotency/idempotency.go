// Package idempotency makes retried HTTP writes safe on the server side, by
// the Idempotency-Key header of the IETF httpapi draft, as Stripe does.
//
// A client sends the same unique key on every attempt of one logical
// request. The first request with a key runs the handler; its status,
// end-to-end headers and body are stored under the key. A repeat with the
// same key and the same payload gets that response replayed, marked
// Idempotent-Replayed: true, without running the handler again, so a POST
// whose response was lost can be retried without creating a second order.
// A repeat that arrives while the first is still running gets 409
// Conflict; one whose payload differs (method, path, query and body,
// fingerprinted) gets 422; on a route that requires a key, a request
// without one gets 400. Keys are scoped per caller by default (a hash of
// the Authorization header), so one caller never sees another's response.
//
// The first request holds its key by a lease, not a lock: a claim lasts
// [Lease] (30 s by default) and the middleware renews it while the handler
// runs, so a slow handler keeps its key, and a crashed process's key is
// free again one lease later. Each claim has a token, and a store completes,
// renews or releases a claim only for the holder of its token (a fencing
// token), so a request that lost its lease cannot overwrite the one that
// took the key over: it learns that it lost it (an event, a log line, and
// its context canceled).
//
// What is stored: every response, errors included (the draft's rule: the
// stored result is replayed, success or error), except that the key is
// freed, so that a retry runs the handler again, when
//   - the status asks the client to retry because the request was not
//     processed (429, 502, 503, 504; see [ReleaseStatus]);
//   - the handler panicked;
//   - the client went away (the request's context was canceled) and the
//     status is 5xx: a handler that honours its context and failed with
//     "context canceled" committed nothing;
//   - the handler said so ([Claim.Abandon]).
//
// Nothing is dropped silently: a store that fails gets the request a 503
// (and an event), saving the result is retried, and a result that still
// could not be saved is reported ([resilience.EventNotStored]) while the
// key stays claimed until its lease runs out.
//
// A [Store] holds the records: [MemoryStore] for one process, Redis (module
// github.com/resiliencekit/resiliencekit/redis) for replicas, or SQL
// (module .../resiliencekit/sql), whose completion can be written in the
// handler's own transaction for exactly-once effects. docs/idempotency.md
// says what each survives.
package idempotency

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/resiliencekit/resiliencekit/internal/safe"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// Header is the request header that carries the key.
const Header = "Idempotency-Key"

// ReplayedHeader is set to "true" on a replayed response.
const ReplayedHeader = "Idempotent-Replayed"

// MaxKeyLen is the longest key accepted, in bytes.
const MaxKeyLen = 255

// ErrInvalidKey is returned by [ParseKey] for a malformed key.
var ErrInvalidKey = errors.New("invalid idempotency key")

// ErrNotOwner is returned by a [Store] asked to complete or release a claim
// that is no longer the one in the store (it expired and was claimed anew).
var ErrNotOwner = errors.New("idempotency claim no longer held")

// ParseKey reads an Idempotency-Key header value: either a structured-field
// string as the draft specifies ("..." with \" and \\ escapes) or, as
// Stripe accepts, a bare run of visible ASCII. The key is 1 to [MaxKeyLen]
// bytes of printable ASCII. Surrounding spaces are ignored.
func ParseKey(v string) (string, error) {
	v = strings.Trim(v, " \t")
	if strings.HasPrefix(v, `"`) {
		return parseQuoted(v)
	}
	if len(v) == 0 || len(v) > MaxKeyLen {
		return "", ErrInvalidKey
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c <= ' ' || c > '~' || c == '"' || c == '\\' {
			return "", ErrInvalidKey
		}
	}
	return v, nil
}

// parseQuoted reads a structured-field string (RFC 8941 section 3.3.3).
func parseQuoted(v string) (string, error) {
	var b strings.Builder
	for i := 1; i < len(v); i++ {
		c := v[i]
		switch {
		case c == '\\':
			i++
			if i >= len(v) || (v[i] != '"' && v[i] != '\\') {
				return "", ErrInvalidKey
			}
			b.WriteByte(v[i])
		case c == '"':
			if i != len(v)-1 || b.Len() == 0 || b.Len() > MaxKeyLen {
				return "", ErrInvalidKey
			}
			return b.String(), nil
		case c < ' ' || c > '~':
			return "", ErrInvalidKey
		default:
			b.WriteByte(c)
		}
	}
	return "", ErrInvalidKey
}

// Record is what a [Store] keeps under a key: a claim while the first
// request runs, then its response.
type Record struct {
	// Fingerprint identifies the request's payload (method, path, body).
	Fingerprint string `json:"fp"`
	// Token identifies the claim of the request that holds the key: the
	// fencing token.
	Token string `json:"token,omitempty"`
	// Done is false while the first request runs.
	Done bool `json:"done,omitempty"`
	// Status, Header and Body are the stored response once Done.
	Status int         `json:"status,omitempty"`
	Header http.Header `json:"header,omitempty"`
	Body   []byte      `json:"body,omitempty"`
	// Truncated means the response was too large to store whole and cannot
	// be replayed.
	Truncated bool `json:"truncated,omitempty"`
}

// ErrFull is returned by a [Store]'s Begin when it has no room for another
// claim: every entry is a request still running. The middleware answers
// 503 with Retry-After.
var ErrFull = errors.New("idempotency store full of requests in flight")

// Store keeps records by key. Implementations are safe for concurrent use,
// Begin is atomic across every process sharing the store, and every method
// honours ctx's deadline. A claim held by claim.Token is the only one that
// Renew, Complete and Release act on.
type Store interface {
	// Begin claims key with claim (not Done) for lease if the key is free
	// or its claim's lease has run out, and returns nil. Otherwise it
	// returns the record found. It returns [ErrFull] if it has no room.
	Begin(ctx context.Context, key string, claim Record, lease time.Duration) (*Record, error)
	// Renew extends the lease of claim to lease from now. It returns
	// [ErrNotOwner] if the key no longer holds claim.
	Renew(ctx context.Context, key string, claim Record, lease time.Duration) error
	// Complete replaces claim by the finished rec, kept for ttl. It returns
	// [ErrNotOwner] if the key no longer holds claim.
	Complete(ctx context.Context, key string, claim, rec Record, ttl time.Duration) error
	// Release frees key if it still holds claim, so the request can be
	// retried. It returns [ErrNotOwner] if the key no longer holds claim.
	Release(ctx context.Context, key string, claim Record) error
}

// Claim is the hold of a running request on its key, which its handler
// finds with [FromContext]. Its methods are safe for concurrent use.
type Claim struct {
	// Key is the key as stored: scoped, so unique to the caller.
	Key string
	// Record is the claim as stored: its fingerprint and token.
	Record Record
	// TTL is how long the result is to be kept.
	TTL time.Duration

	abandoned, completed atomic.Bool
}

// Abandon tells the middleware that the request committed nothing: the key
// is freed instead of the response stored, so a retry runs the handler
// again. For a handler whose transaction failed.
func (c *Claim) Abandon() { c.abandoned.Store(true) }

// Completed tells the middleware that the handler stored the result under
// the claim itself, in its own transaction (the SQL store's CompleteTx
// calls it): the middleware stores nothing, and stops renewing the lease.
// If that transaction then fails, the handler calls [Claim.Abandon], which
// wins.
func (c *Claim) Completed() { c.completed.Store(true) }

type claimKey struct{}

// FromContext returns the claim of the request whose context ctx is, or
// nil if the middleware did not run it under a key.
func FromContext(ctx context.Context) *Claim {
	c, _ := ctx.Value(claimKey{}).(*Claim)
	return c
}

// Option configures [Middleware].
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	required     bool
	ttl          time.Duration
	lease        time.Duration
	methods      []string
	maxBody      int64
	maxResponse  int
	scope        func(*http.Request) string
	storeTimeout time.Duration
	release      map[int]bool
	exclude      map[string]bool
	listener     *safe.Listener
	log          *slog.Logger
}

// Required makes a key mandatory on the covered methods: a request without
// one gets 400. Default: requests without a key pass through unprotected.
func Required() Option { return optionFunc(func(c *config) { c.required = true }) }

// positive panics unless d > 0.
func positive(name string, d time.Duration) {
	if d <= 0 {
		panic(fmt.Sprintf("idempotency: %s(%v): d must be more than 0", name, d))
	}
}

// TTL sets how long a response is kept for replay. Default 24 h. It
// panics if d is not positive.
func TTL(d time.Duration) Option {
	positive("TTL", d)
	return optionFunc(func(c *config) { c.ttl = d })
}

// Lease sets how long a claim holds its key without a renewal; the
// middleware renews it every third of it while the handler runs, so a
// handler may run longer. A key held by a crashed process is free again
// after one lease. Run-once holds while renewals reach the store within a
// lease: make it long against the store's worst latency (if it runs out,
// the request learns it, and a repeat may run; only the SQL store's
// transactional completion fences the effect itself). Default 30 s. It
// panics if d is not positive.
func Lease(d time.Duration) Option {
	positive("Lease", d)
	return optionFunc(func(c *config) { c.lease = d })
}

// StoreTimeout bounds each call to the store. Default 500 ms, so that a
// frozen store gets a request its 503 within about a second. It panics if
// d is not positive.
func StoreTimeout(d time.Duration) Option {
	positive("StoreTimeout", d)
	return optionFunc(func(c *config) { c.storeTimeout = d })
}

// Methods sets the methods the middleware covers; others pass through.
// Default POST and PATCH.
func Methods(methods ...string) Option {
	return optionFunc(func(c *config) { c.methods = methods })
}

// MaxBody sets the largest request body fingerprinted; a larger one gets
// 413. Default 1 MiB. It panics if n < 1.
func MaxBody(n int64) Option {
	if n < 1 {
		panic(fmt.Sprintf("idempotency: MaxBody(%d): n must be 1 or more", n))
	}
	return optionFunc(func(c *config) { c.maxBody = n })
}

// MaxResponse sets the largest response body stored for replay. A larger
// response is sent in full, but a repeat of its key gets 500 rather than
// running the handler again. Default 1 MiB. It panics if n < 1.
func MaxResponse(n int) Option {
	if n < 1 {
		panic(fmt.Sprintf("idempotency: MaxResponse(%d): n must be 1 or more", n))
	}
	return optionFunc(func(c *config) { c.maxResponse = n })
}

// ReleaseStatus sets the statuses that are not stored: the key is freed,
// so that the client's retry runs the handler again. They are the statuses
// that tell a client to retry because the request was not processed.
// Default 429, 502, 503, 504.
func ReleaseStatus(codes ...int) Option {
	return optionFunc(func(c *config) {
		c.release = make(map[int]bool, len(codes))
		for _, code := range codes {
			c.release[code] = true
		}
	})
}

// Scope sets a function whose result namespaces keys, such as the
// authenticated account, so that two callers cannot collide or read each
// other's responses. Default: a hash of the request's Authorization header.
func Scope(fn func(r *http.Request) string) Option {
	return optionFunc(func(c *config) {
		if fn == nil {
			panic("idempotency: Scope(nil): use SharedKeys for one namespace")
		}
		c.scope = fn
	})
}

// SharedKeys puts every caller's keys in one namespace: a caller that
// reuses another's key gets its response. For services whose callers are
// one trusted party. Default: keys scoped per caller (see [Scope]).
func SharedKeys() Option {
	return optionFunc(func(c *config) { c.scope = func(*http.Request) string { return "" } })
}

// ReplayExclude sets the response headers that are neither stored nor
// replayed. Default: the hop-by-hop headers (Connection, Keep-Alive,
// Proxy-Authenticate, Proxy-Authorization, TE, Trailer, Transfer-Encoding,
// Upgrade), Date and Set-Cookie. Headers that outer middleware set on the
// repeat are kept whatever the stored response had.
func ReplayExclude(headers ...string) Option {
	return optionFunc(func(c *config) {
		c.exclude = make(map[string]bool, len(headers))
		for _, h := range headers {
			c.exclude[http.CanonicalHeaderKey(h)] = true
		}
	})
}

// WithListener reports to l what the middleware cannot put in a response:
// a store failure ([resilience.EventStoreFailed]), a lost lease
// ([resilience.EventLeaseLost]) and a result that could not be stored
// ([resilience.EventNotStored]), each named "idempotency". Default none;
// each is logged too (see [WithLogger]).
func WithListener(l resilience.Listener) Option {
	return optionFunc(func(c *config) { c.listener = safe.New("idempotency", c.listener, l) })
}

// WithLogger sets where the middleware logs what goes wrong with its
// store. Default slog.Default().
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) { c.log = l })
}

// scopeKey returns key in scope: a hash of the scope, so that any scope
// (bytes a store would refuse included) makes an unambiguous key of
// printable ASCII, and the key.
func scopeKey(scope, key string) string {
	sum := sha256.Sum256([]byte(scope))
	return hex.EncodeToString(sum[:16]) + ":" + key
}

// scopeByAuthorization is the default scope: a hash of the Authorization
// header, so the header's secret is not in the key.
func scopeByAuthorization(r *http.Request) string { return r.Header.Get("Authorization") }

// Middleware returns middleware that makes covered requests with an
// Idempotency-Key run at most once per key, replaying the stored response
// to repeats. A nil store means a [MemoryStore] of default size. When the
// store fails, the request gets 503 and the handler does not run. The
// middleware is safe for concurrent use.
func Middleware(store Store, opts ...Option) func(http.Handler) http.Handler {
	if store == nil {
		store = NewMemoryStore(0)
	}
	cfg := config{
		ttl:          24 * time.Hour,
		lease:        30 * time.Second,
		methods:      []string{http.MethodPost, http.MethodPatch},
		maxBody:      1 << 20,
		maxResponse:  1 << 20,
		storeTimeout: 500 * time.Millisecond,
		scope:        scopeByAuthorization,
	}
	ReleaseStatus(http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout).apply(&cfg)
	ReplayExclude("Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "TE", "Trailer",
		"Transfer-Encoding", "Upgrade", "Date", "Set-Cookie").apply(&cfg)
	for _, o := range opts {
		if o != nil {
			o.apply(&cfg)
		}
	}
	if cfg.lease < 3*cfg.storeTimeout {
		panic(fmt.Sprintf("idempotency: Lease(%v) is under 3 StoreTimeout(%v): a renewal could not reach the store in time", cfg.lease, cfg.storeTimeout))
	}
	return func(next http.Handler) http.Handler {
		return &handler{cfg: cfg, store: store, next: next}
	}
}

type handler struct {
	cfg     config
	store   Store
	next    http.Handler
	orphans orphans
}

func (h *handler) covers(method string) bool {
	return slices.Contains(h.cfg.methods, method)
}

// report sends an event and logs it.
func (h *handler) report(kind resilience.EventKind, key string, err error) {
	h.cfg.listener.Emit(resilience.Event{Kind: kind, Err: err})
	log := h.cfg.log
	if log == nil {
		log = slog.Default()
	}
	log.Warn("idempotency: "+kind.String(), "key", key, "error", err)
}

// storeCtx bounds one store call. It outlives the request's cancellation:
// the store is written even if the client has gone, since that is when
// the stored response matters most.
func (h *handler) storeCtx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(r.Context()), h.cfg.storeTimeout)
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !h.covers(r.Method) {
		h.next.ServeHTTP(w, r)
		return
	}
	values := r.Header.Values(Header)
	if len(values) == 0 {
		if h.cfg.required {
			problem(w, http.StatusBadRequest, "missing idempotency key", "this request requires an Idempotency-Key header")
			return
		}
		h.next.ServeHTTP(w, r)
		return
	}
	key, err := ParseKey(values[0])
	if err != nil || len(values) > 1 {
		problem(w, http.StatusBadRequest, "invalid idempotency key", "the Idempotency-Key header must be one string of 1 to 255 printable characters")
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, h.cfg.maxBody+1))
	if err != nil {
		problem(w, http.StatusBadRequest, "unreadable body", err.Error())
		return
	}
	if int64(len(body)) > h.cfg.maxBody {
		problem(w, http.StatusRequestEntityTooLarge, "request body too large", "the body is too large to be protected by an idempotency key")
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	key = scopeKey(h.cfg.scope(r), key)
	claim := &Claim{Key: key, Record: Record{Fingerprint: fingerprint(r, body), Token: rand.Text()}, TTL: h.cfg.ttl}

	found, err := h.begin(r, claim)
	switch {
	case errors.Is(err, ErrFull):
		w.Header().Set("Retry-After", "1")
		problem(w, http.StatusServiceUnavailable, "too many requests in flight", "the idempotency store has no room for another request")
	case err != nil:
		h.report(resilience.EventStoreFailed, key, err)
		w.Header().Set("Retry-After", "1")
		problem(w, http.StatusServiceUnavailable, "idempotency store unavailable", "")
	case found == nil:
		h.run(w, r, claim)
	case found.Fingerprint != claim.Record.Fingerprint:
		problem(w, http.StatusUnprocessableEntity, "idempotency key reused", "this key was used for a different request")
	case !found.Done:
		w.Header().Set("Retry-After", "1")
		problem(w, http.StatusConflict, "request in progress", "a request with this key is still being processed")
	case found.Truncated:
		problem(w, http.StatusInternalServerError, "response not replayable", "the response to this key was too large to store")
	default:
		h.replay(w, found)
	}
}

// errLeaseLost is the cause of a handler's canceled context when its
// request lost the lease on its key.
var errLeaseLost = errors.New("idempotency: the lease on the key was lost")

// run serves the first request of a key, holding its lease, and stores
// its response.
func (h *handler) run(w http.ResponseWriter, r *http.Request, claim *Claim) {
	ctx, cancel := context.WithCancelCause(context.WithValue(r.Context(), claimKey{}, claim))
	defer cancel(nil)
	stop := h.renew(r, claim, cancel)
	rec := &recorder{ResponseWriter: w, max: h.cfg.maxResponse, outer: make(map[string]bool, len(w.Header()))}
	for k := range w.Header() {
		rec.outer[k] = true
	}
	finished := false
	defer func() {
		if !finished { // a panic or runtime.Goexit
			stop()
			h.release(r, claim)
		}
	}()
	h.next.ServeHTTP(rec, r.WithContext(ctx))
	finished = true
	lost := stop()
	gone := r.Context().Err() != nil
	if rec.status == 0 && !gone && !rec.hijacked {
		rec.WriteHeader(http.StatusOK)
	}
	switch {
	case claim.abandoned.Load() || h.cfg.release[rec.status] || (gone && (rec.status == 0 || rec.status >= 500)):
		h.release(r, claim) // nothing committed, or the client is told to retry
		return
	case claim.completed.Load():
		return
	case lost:
		h.report(resilience.EventNotStored, claim.Key, errLeaseLost)
		return
	}
	done := Record{
		Fingerprint: claim.Record.Fingerprint,
		Done:        true,
		Status:      rec.status,
		Header:      h.stored(rec.header, rec.outer),
		Body:        rec.body,
		Truncated:   rec.truncated || rec.hijacked, // a hijacked connection cannot be replayed
	}
	tried := false
	err := h.retry(r, func(ctx context.Context) error {
		err := h.store.Complete(ctx, claim.Key, claim.Record, done, h.cfg.ttl)
		if errors.Is(err, ErrNotOwner) && tried && h.storedAlready(r, claim) {
			return nil // an earlier try got through, its answer did not
		}
		tried = true
		return err
	})
	if err != nil {
		// The claim stays until its lease runs out: repeats get 409 until
		// then rather than a second run while this one's effect may stand.
		h.report(resilience.EventNotStored, claim.Key, err)
	}
}

// storedAlready reports whether claim's key holds a completed record of
// claim's request: a Complete whose answer was lost got through. Looking
// claims the key if it is free, and frees it again.
func (h *handler) storedAlready(r *http.Request, claim *Claim) bool {
	ctx, cancel := h.storeCtx(r)
	defer cancel()
	look := Record{Fingerprint: claim.Record.Fingerprint, Token: rand.Text()}
	found, err := h.store.Begin(ctx, claim.Key, look, h.cfg.lease)
	if err == nil && found == nil {
		_ = h.store.Release(ctx, claim.Key, look)
	}
	return err == nil && found != nil && found.Done && found.Fingerprint == claim.Record.Fingerprint
}

// retry calls op on the store a few times within a bound, each call
// bounded by the store timeout; a lost claim is not retried.
func (h *handler) retry(r *http.Request, op func(ctx context.Context) error) error {
	p := retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(h.cfg.storeTimeout/5),
		retrypolicy.RetryIf(func(err error) bool { return !errors.Is(err, ErrNotOwner) }))
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 4*h.cfg.storeTimeout)
	defer cancel()
	_, err := retrypolicy.Do(ctx, p, func(context.Context) (struct{}, error) {
		c, cancel := h.storeCtx(r)
		defer cancel()
		return struct{}{}, op(c)
	})
	return err
}

// begin claims the key of claim. A claim that an earlier Begin of this
// middleware's may have left when its call gave up (the store took it
// after) is freed when it is found, rather than hold its key for a lease.
func (h *handler) begin(r *http.Request, claim *Claim) (*Record, error) {
	for range 2 {
		ctx, cancel := h.storeCtx(r) // a client that leaves does not make the store fail
		found, err := h.store.Begin(ctx, claim.Key, claim.Record, h.cfg.lease)
		cancel()
		if err != nil {
			h.orphans.add(claim.Key, claim.Record)
			return nil, err
		}
		if found == nil || found.Done {
			return found, nil
		}
		orphan, ok := h.orphans.take(claim.Key) // only when held: no lock on the common path
		if !ok || found.Token != orphan.Token {
			return found, nil
		}
		ctx, cancel = h.storeCtx(r)
		err = h.store.Release(ctx, claim.Key, orphan)
		cancel()
		if err != nil && !errors.Is(err, ErrNotOwner) {
			return found, nil // held for its lease, as it would have been
		}
	}
	return nil, errors.New("idempotency: key taken again while freeing an orphan claim")
}

// orphans are claims that Begins of this middleware may have left: at most
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

// release frees claim's key, reporting a failure.
func (h *handler) release(r *http.Request, claim *Claim) {
	err := h.retry(r, func(ctx context.Context) error { return h.store.Release(ctx, claim.Key, claim.Record) })
	if err != nil && !errors.Is(err, ErrNotOwner) {
		h.report(resilience.EventStoreFailed, claim.Key, err)
	}
}

// renew renews claim's lease every third of it until the returned stop is
// called, which waits for it and reports whether the lease was lost. On a
// loss it reports it and cancels the handler's context by cancel.
func (h *handler) renew(r *http.Request, claim *Claim, cancel context.CancelCauseFunc) (stop func() (lost bool)) {
	done := make(chan struct{})
	exited := make(chan bool, 1)
	go func() {
		lost := false
		defer func() { exited <- lost }()
		held := time.Now().Add(h.cfg.lease)
		wait := h.cfg.lease / 3
		for {
			t := time.NewTimer(wait)
			select {
			case <-done:
				t.Stop()
				return
			case <-t.C:
			}
			if claim.completed.Load() {
				return // stored by the handler itself: nothing to hold
			}
			start := time.Now()
			// Bounded by what is left of the lease, so that a slow call
			// leaves time for another try before it runs out.
			ctx, c := context.WithTimeout(context.WithoutCancel(r.Context()), min(h.cfg.storeTimeout, max(time.Until(held), 0)))
			err := h.store.Renew(ctx, claim.Key, claim.Record, h.cfg.lease)
			c()
			switch {
			case err == nil:
				held = start.Add(h.cfg.lease)
				wait = h.cfg.lease / 3
				continue
			case errors.Is(err, ErrNotOwner) && claim.completed.Load():
				return // completed in the handler's transaction meanwhile
			case errors.Is(err, ErrNotOwner):
			case time.Now().Before(held):
				h.report(resilience.EventStoreFailed, claim.Key, err)
				wait = min(h.cfg.lease/12, max(time.Until(held)/2, time.Millisecond)) // try again soon
				continue
			default:
				err = fmt.Errorf("%w: renewal failed until it ran out: %w", errLeaseLost, err)
			}
			lost = true
			h.report(resilience.EventLeaseLost, claim.Key, err)
			cancel(errLeaseLost)
			return
		}
	}()
	return sync.OnceValue(func() bool {
		close(done)
		return <-exited
	})
}

// stored returns the headers of header to store: all but the excluded
// ones and those outer middleware had set before the handler ran (they are
// this request's, not the response's).
func (h *handler) stored(header http.Header, outer map[string]bool) http.Header {
	out := make(http.Header, len(header))
	for k, vs := range header {
		if !h.cfg.exclude[k] && !outer[k] {
			out[k] = vs
		}
	}
	return out
}

func fingerprint(r *http.Request, body []byte) string {
	s := sha256.New()
	io.WriteString(s, r.Method)
	s.Write([]byte{0})
	io.WriteString(s, r.URL.EscapedPath())
	s.Write([]byte{0})
	io.WriteString(s, r.URL.RawQuery)
	s.Write([]byte{0})
	s.Write(body)
	return hex.EncodeToString(s.Sum(nil))
}

// replay writes a stored response: its headers but the excluded ones and
// those already set on w (by outer middleware, for this request), its
// status and body, marked as a replay.
func (h *handler) replay(w http.ResponseWriter, rec *Record) {
	out := w.Header()
	for k, vs := range rec.Header {
		if _, set := out[k]; !set && !h.cfg.exclude[k] {
			out[k] = append([]string(nil), vs...)
		}
	}
	out.Set(ReplayedHeader, "true")
	w.WriteHeader(rec.Status)
	_, _ = w.Write(rec.Body)
}

// problem writes an RFC 9457 problem document.
func problem(w http.ResponseWriter, status int, title, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	body := `{"status":` + strconv.Itoa(status) + `,"title":` + strconv.Quote(title)
	if detail != "" {
		body += `,"detail":` + strconv.Quote(detail)
	}
	_, _ = io.WriteString(w, body+"}\n")
}

// recorder passes a response through and keeps a copy of it.
type recorder struct {
	http.ResponseWriter
	max       int
	status    int
	header    http.Header
	body      []byte
	truncated bool
	hijacked  bool
	outer     map[string]bool // headers set before the handler ran
}

// Flush sends what was written so far, as an http.Flusher.
func (r *recorder) Flush() { _ = r.FlushError() }

// FlushError is Flush with its error, for http.ResponseController.
func (r *recorder) FlushError() error {
	if r.status == 0 {
		r.WriteHeader(http.StatusOK) // as net/http does on a flush
	}
	return http.NewResponseController(r.ResponseWriter).Flush()
}

// Hijack hands over the connection, for http.ResponseController; the
// response cannot be replayed then.
func (r *recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, rw, err := http.NewResponseController(r.ResponseWriter).Hijack()
	if err == nil {
		r.hijacked = true
	}
	return conn, rw, err
}

func (r *recorder) WriteHeader(status int) {
	if status < http.StatusOK && status != http.StatusSwitchingProtocols {
		r.ResponseWriter.WriteHeader(status) // informational, such as 103 Early Hints
		return
	}
	if r.status != 0 {
		return
	}
	r.status = status
	r.header = r.ResponseWriter.Header().Clone()
	r.ResponseWriter.WriteHeader(status)
}

func (r *recorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.WriteHeader(http.StatusOK)
	}
	if !r.truncated {
		if len(r.body)+len(p) > r.max {
			r.truncated = true
			r.body = nil
		} else {
			r.body = append(r.body, p...)
		}
	}
	return r.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
