// Package idempotency makes retried HTTP writes safe on the server side, by
// the Idempotency-Key header of the IETF httpapi draft, as Stripe does.
//
// A client sends the same unique key on every attempt of one logical
// request. The first request with a key runs the handler; its status,
// headers and body are stored under the key. A repeat with the same key
// and the same payload gets that response replayed without running the
// handler again, so a POST whose response was lost can be retried without
// creating a second order. A repeat that arrives while the first is still
// running gets 409 Conflict; one whose payload differs (method, path and
// body, fingerprinted) gets 422 Unprocessable Content; on a route that
// requires a key, a request without one gets 400 Bad Request. Records
// expire after a TTL, 24 hours by default.
//
// A [Store] holds the records: [MemoryStore] for one process, or the Redis
// store in package redisstore for replicas that share keys. The claim of a
// key is atomic in both, so concurrent repeats run the handler once.
//
// Every response is stored, errors included, except those that ask the
// client to retry because the request was not processed (429, 502, 503,
// 504; see [ReleaseStatus]): for those the key is freed, so the retry runs
// the handler. If the handler panics, the key is freed too.
package idempotency

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
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
	// Token identifies the claim of the request that holds the key.
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

// Store keeps records by key. Implementations are safe for concurrent use,
// and Begin is atomic across every process sharing the store.
type Store interface {
	// Begin claims key with claim (not Done) for lockTTL if the key is
	// free, and returns nil. Otherwise it returns the record found.
	Begin(ctx context.Context, key string, claim Record, lockTTL time.Duration) (*Record, error)
	// Complete replaces claim by the finished rec, kept for ttl. It returns
	// [ErrNotOwner] if the key no longer holds claim.
	Complete(ctx context.Context, key string, claim, rec Record, ttl time.Duration) error
	// Release frees key if it still holds claim, so the request can be
	// retried.
	Release(ctx context.Context, key string, claim Record) error
}

// Option configures [Middleware].
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	required    bool
	ttl         time.Duration
	lockTTL     time.Duration
	methods     []string
	maxBody     int64
	maxResponse int
	scope       func(*http.Request) string
	storeTime   time.Duration
	release     map[int]bool
}

// Required makes a key mandatory on the covered methods: a request without
// one gets 400. Default: requests without a key pass through unprotected.
func Required() Option { return optionFunc(func(c *config) { c.required = true }) }

// TTL sets how long a response is kept for replay. Default 24 h.
func TTL(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d > 0 {
			c.ttl = d
		}
	})
}

// LockTTL sets how long a claim holds a key while its request runs, so a
// key held by a crashed process frees itself. A handler running longer may
// see the key claimed again. Default 5 min.
func LockTTL(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d > 0 {
			c.lockTTL = d
		}
	})
}

// Methods sets the methods the middleware covers; others pass through.
// Default POST and PATCH.
func Methods(methods ...string) Option {
	return optionFunc(func(c *config) { c.methods = methods })
}

// MaxBody sets the largest request body fingerprinted; a larger one gets
// 413. Default 1 MiB.
func MaxBody(n int64) Option {
	return optionFunc(func(c *config) {
		if n > 0 {
			c.maxBody = n
		}
	})
}

// MaxResponse sets the largest response body stored for replay. A larger
// response is sent in full, but a repeat of its key gets 500 rather than
// running the handler again. Default 1 MiB.
func MaxResponse(n int) Option {
	return optionFunc(func(c *config) {
		if n > 0 {
			c.maxResponse = n
		}
	})
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
// authenticated account, so that two clients cannot collide or read each
// other's responses. Default: one namespace.
func Scope(fn func(r *http.Request) string) Option {
	return optionFunc(func(c *config) { c.scope = fn })
}

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
		ttl:         24 * time.Hour,
		lockTTL:     5 * time.Minute,
		methods:     []string{http.MethodPost, http.MethodPatch},
		maxBody:     1 << 20,
		maxResponse: 1 << 20,
		storeTime:   5 * time.Second,
	}
	ReleaseStatus(http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout).apply(&cfg)
	for _, o := range opts {
		o.apply(&cfg)
	}
	return func(next http.Handler) http.Handler {
		return &handler{cfg: cfg, store: store, next: next}
	}
}

type handler struct {
	cfg   config
	store Store
	next  http.Handler
}

func (h *handler) covers(method string) bool {
	for _, m := range h.cfg.methods {
		if m == method {
			return true
		}
	}
	return false
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
	if h.cfg.scope != nil {
		key = h.cfg.scope(r) + "\x00" + key
	}
	claim := Record{Fingerprint: fingerprint(r, body), Token: rand.Text()}

	found, err := h.store.Begin(r.Context(), key, claim, h.cfg.lockTTL)
	switch {
	case err != nil:
		problem(w, http.StatusServiceUnavailable, "idempotency store unavailable", "")
		return
	case found == nil:
		h.run(w, r, key, claim)
	case found.Fingerprint != claim.Fingerprint:
		problem(w, http.StatusUnprocessableEntity, "idempotency key reused", "this key was used for a different request")
	case !found.Done:
		w.Header().Set("Retry-After", "1")
		problem(w, http.StatusConflict, "request in progress", "a request with this key is still being processed")
	case found.Truncated:
		problem(w, http.StatusInternalServerError, "response not replayable", "the response to this key was too large to store")
	default:
		replay(w, found)
	}
}

// run serves the first request of a key and stores its response.
func (h *handler) run(w http.ResponseWriter, r *http.Request, key string, claim Record) {
	// The store is written even if the client has gone: that is when the
	// stored response matters most.
	storeCtx := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.WithoutCancel(r.Context()), h.cfg.storeTime)
	}
	rec := &recorder{ResponseWriter: w, max: h.cfg.maxResponse}
	completed := false
	defer func() {
		if !completed {
			ctx, cancel := storeCtx()
			defer cancel()
			_ = h.store.Release(ctx, key, claim)
		}
	}()
	h.next.ServeHTTP(rec, r)
	if rec.status == 0 {
		rec.WriteHeader(http.StatusOK)
	}
	if h.cfg.release[rec.status] {
		return // the deferred release frees the key
	}
	done := Record{
		Fingerprint: claim.Fingerprint,
		Done:        true,
		Status:      rec.status,
		Header:      rec.header,
		Body:        rec.body,
		Truncated:   rec.truncated,
	}
	ctx, cancel := storeCtx()
	defer cancel()
	// A failed write leaves the claim to expire after LockTTL; repeats get
	// 409 until then rather than a second run.
	_ = h.store.Complete(ctx, key, claim, done, h.cfg.ttl)
	completed = true
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

func replay(w http.ResponseWriter, rec *Record) {
	h := w.Header()
	for k, vs := range rec.Header {
		h[k] = append([]string(nil), vs...)
	}
	h.Set(ReplayedHeader, "true")
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
