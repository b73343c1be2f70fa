package idempotency

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/resiliencekit/resiliencekit/idempotencykey"
)

// ReplayedHeader is set to "true" on a replayed response.
const ReplayedHeader = "Idempotent-Replayed"

// Middleware returns middleware that makes covered requests with an
// Idempotency-Key run at most once per key on a [Guard] (see the package
// documentation), replaying the stored response to repeats: its status,
// end-to-end headers and body, marked [ReplayedHeader]: true. A repeat
// while the first runs gets 409 with Retry-After, one with another
// payload (method, path, query and body; among the covered methods, see
// [Methods]) 422, a malformed key 400. A client that sends a key on the
// request that follows a 307 or 308 (net/http's Client copies the header)
// gets 422 for the new path, or the stored redirect again for the same
// path on another host: a key belongs to one request, and a client gives
// each hop its own (httpclient does). A nil
// store means a [MemoryStore] of default size. When the store fails, the
// request gets 503 and the handler does not run, until the store has
// failed for [FailOpenAfter]: then requests run on this process's own
// records. Keys are namespaced by who the caller is, and the middleware
// does not guess it: it panics unless given [Scope] (per caller) or
// [SharedKeys] (one namespace); a keyed request whose Scope is "" gets
// 401, never a shared namespace. It panics too if the lease is under
// three store timeouts. The middleware is safe for concurrent use.
func Middleware(store Store, opts ...Option) func(http.Handler) http.Handler {
	cfg := newConfig(opts)
	if cfg.scope == nil {
		panic("idempotency: Middleware: give Scope (keys per caller, by identity) or SharedKeys (one namespace): no default, so that callers are neither silently shared nor split")
	}
	g := newGuard(store, cfg)
	return func(next http.Handler) http.Handler {
		return &handler{guard: g, cfg: &g.cfg, next: next}
	}
}

type handler struct {
	guard *Guard
	cfg   *config
	next  http.Handler
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !slices.Contains(h.cfg.methods, r.Method) {
		h.next.ServeHTTP(w, r)
		return
	}
	key, body, ok := h.admit(w, r)
	switch {
	case !ok:
		return
	case key == "":
		h.next.ServeHTTP(w, r)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	scope := h.cfg.scope(r)
	if scope == "" && !h.cfg.shared {
		problem(w, http.StatusUnauthorized, "no caller identity",
			"the idempotency scope found no identity for this request, so its key has no namespace of its own: keys are shared between callers only with SharedKeys")
		return
	}
	claim, stored, err := h.guard.Begin(r.Context(), scope, key, fingerprint(r, body))
	switch {
	case err != nil:
		refuse(w, err)
	case stored != nil:
		h.replay(w, stored)
	case r.Context().Err() != nil:
		// Its deadline passed, or its client left, as the key was claimed
		// (a budget told by deadline.Middleware spent on a slow store):
		// nothing ran, and the key is freed for a retry.
		_ = claim.Release(context.WithoutCancel(r.Context()))
		w.Header().Set("Retry-After", "0")
		problem(w, http.StatusServiceUnavailable, "deadline passed", "the request's deadline passed as its idempotency key was claimed: it did not run, and a retry with the key may")
	default:
		h.run(w, r, claim)
	}
}

// admit reads the key and the body of a covered request. It answers a
// request it refuses itself, and returns ok false then; a request without
// a key that may pass has an empty key.
func (h *handler) admit(w http.ResponseWriter, r *http.Request) (key string, body []byte, ok bool) {
	values := r.Header.Values(Header)
	if len(values) == 0 {
		if h.cfg.required {
			problem(w, http.StatusBadRequest, "missing idempotency key", "this request requires an Idempotency-Key header")
			return "", nil, false
		}
		return "", nil, true
	}
	key, err := idempotencykey.Parse(values[0])
	if err != nil || len(values) > 1 {
		problem(w, http.StatusBadRequest, "invalid idempotency key", "the Idempotency-Key header must be one string of 1 to 255 printable characters")
		return "", nil, false
	}
	body, err = io.ReadAll(io.LimitReader(r.Body, min(h.cfg.maxBody, math.MaxInt64-1)+1)) // one past the most: over it
	// An outer http.MaxBytesHandler's limit: the caller's error, as our own MaxBody's.
	var tooLarge *http.MaxBytesError
	if err != nil && !errors.As(err, &tooLarge) {
		problem(w, http.StatusBadRequest, "unreadable body", err.Error())
		return "", nil, false
	}
	if tooLarge != nil || int64(len(body)) > h.cfg.maxBody {
		problem(w, http.StatusRequestEntityTooLarge, "request body too large", "the body is too large to be protected by an idempotency key")
		return "", nil, false
	}
	return key, body, true
}

// refuse answers a request whose key [Guard.Begin] refused.
func refuse(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, ErrFull):
		w.Header().Set("Retry-After", "1")
		problem(w, http.StatusServiceUnavailable, "too many requests in flight", "the idempotency store has no room for another request")
	case errors.Is(err, ErrKeyReused):
		problem(w, http.StatusUnprocessableEntity, "idempotency key reused", "this key was used for a different request")
	case errors.Is(err, ErrInProgress):
		w.Header().Set("Retry-After", "1")
		problem(w, http.StatusConflict, "request in progress", "a request with this key is still being processed")
	case errors.Is(err, ErrNotReplayable):
		problem(w, http.StatusInternalServerError, "response not replayable", "the response to this key was too large to store")
	case errors.Is(err, ErrIncomplete):
		problem(w, http.StatusInternalServerError, "response incomplete",
			"the request with this key ran, but its client left before the response was sent whole: it is not replayed, and not run again")
	default: // the store failed
		w.Header().Set("Retry-After", "1")
		problem(w, http.StatusServiceUnavailable, "idempotency store unavailable", "")
	}
}

// run serves the first request of a key under its claim, and stores its
// response. A response is stored as it was written, whether or not the
// client is still there: a handler that committed and then saw its
// context end must not run again. The key is freed only when the handler
// says that nothing committed (Claim.Abandon, or a status of
// ReleaseStatus). A response that never reached its client whole is
// stored as Incomplete: a write failed; its body is shorter than the
// Content-Length it declared; the client left before the handler
// returned, with nothing written, or after the response had begun (the
// handler may have cut it short as its context ended; flushed or not,
// since net/http sends a body as its buffer fills). A response begun only
// after its client had gone was written whole by a handler that did not
// stop for it: it is stored, and a retry gets it replayed.
// A retry then gets 500 "response incomplete", not a replay, and nothing
// runs again. After a panic, the key is freed if no status was
// written, and otherwise a 500 is stored.
func (h *handler) run(w http.ResponseWriter, r *http.Request, claim *Claim) {
	rec := newRecorder(w, r, h.cfg.maxResponse)
	returned := false
	defer func() {
		// A save's retries go on on a goroutine of their own after a first
		// try, so that a failing store does not hold the client and the
		// panic for the lease (review149).
		switch {
		case returned:
		case rec.hijacked: // it may have answered on the connection: not run again, not replayed (review115)
			claim.CompleteLater(r.Context(), hijackedRecord)
		case rec.status == 0: // a panic or runtime.Goexit before anything was sent
			_ = claim.Release(r.Context()) // bounded by the release's few tries
		default: // after a status was sent: what the handler did may stand
			claim.CompleteLater(r.Context(), panicRecord)
		}
	}()
	h.next.ServeHTTP(rec, r.WithContext(claim.Context()))
	returned = true
	gone := r.Context().Err() != nil
	if rec.status == 0 && !gone && !rec.hijacked {
		rec.WriteHeader(http.StatusOK)
	}
	header := h.stored(rec.header, rec.outer)
	rec.headHeader(header)
	// A held response goes out once saved; or, if a first try to save it
	// fails, at once, whole, while the save is tried again: a store slow to
	// answer holds the client up for one StoreTimeout, not a lease. Either
	// way within the handler, so that a graceful shutdown waits for the save.
	_ = claim.complete(r.Context(), Record{ // a failure is reported
		Status:     rec.status,
		Header:     header,
		Body:       rec.body,
		Truncated:  rec.truncated && !rec.head || rec.hijacked, // a HEAD's body is never sent; a hijacked connection cannot be replayed
		Incomplete: rec.failed || rec.short() || (gone && (rec.status == 0 || rec.began)),
	}, rec.send)
	rec.pass()
}

// hijackedRecord is what is stored for a handler that hijacked its
// connection and then panicked or called runtime.Goexit: what it sent is
// unknown, and cannot be replayed (Truncated), as for one that returned.
var hijackedRecord = Record{Status: http.StatusInternalServerError, Truncated: true}

// panicRecord is what is stored for a handler that panicked after it sent
// a status: a 500, as Stripe stores after its atomic phase.
var panicRecord = Record{
	Status: http.StatusInternalServerError,
	Header: http.Header{"Content-Type": {"application/problem+json"}},
	Body:   []byte(`{"status":500,"title":"internal error","detail":"the request failed after it began to answer"}` + "\n"),
}

// stored returns the headers of header to store: all but the excluded
// ones and those outer middleware had set before the handler ran (they are
// this request's, not the response's).
func (h *handler) stored(header http.Header, outer map[string]bool) http.Header {
	out := make(http.Header, len(header))
	for k, vs := range header {
		if !h.excluded(k) && !outer[k] {
			out[k] = vs
		}
	}
	return out
}

// excluded reports whether a header named k is neither stored nor
// replayed: one of ReplayExclude's, whatever the case it was set in (a
// name set into the map as it is, "set-cookie", is sent too), or a
// trailer declared with http.TrailerPrefix.
func (h *handler) excluded(k string) bool {
	return h.cfg.exclude[http.CanonicalHeaderKey(k)] || strings.HasPrefix(k, http.TrailerPrefix)
}

// replay writes a stored response: its headers but the excluded ones and
// those already set on w (by outer middleware, for this request), its
// status and body, marked as a replay.
func (h *handler) replay(w http.ResponseWriter, rec *Record) {
	out := w.Header()
	for k, vs := range rec.Header {
		if _, set := out[k]; !set && !h.excluded(k) {
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
