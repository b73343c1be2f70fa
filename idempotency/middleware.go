package idempotency

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"slices"
	"strconv"

	"github.com/resiliencekit/resiliencekit/idempotencykey"
)

// ReplayedHeader is set to "true" on a replayed response.
const ReplayedHeader = "Idempotent-Replayed"

// Middleware returns middleware that makes covered requests with an
// Idempotency-Key run at most once per key on a [Guard] (see the package
// documentation), replaying the stored response to repeats: its status,
// end-to-end headers and body, marked [ReplayedHeader]: true. A repeat
// while the first runs gets 409 with Retry-After, one with another
// payload (method, path, query and body) 422, a malformed key 400. A nil
// store means a [MemoryStore] of default size. When the store fails, the
// request gets 503 and the handler does not run. It panics if the lease
// is under three store timeouts. The middleware is safe for concurrent
// use.
func Middleware(store Store, opts ...Option) func(http.Handler) http.Handler {
	g := newGuard(store, newConfig(opts))
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
	claim, stored, err := h.guard.Begin(r.Context(), h.cfg.scope(r), key, fingerprint(r, body))
	switch {
	case err != nil:
		refuse(w, err)
	case stored != nil:
		h.replay(w, stored)
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
	body, err = io.ReadAll(io.LimitReader(r.Body, h.cfg.maxBody+1))
	if err != nil {
		problem(w, http.StatusBadRequest, "unreadable body", err.Error())
		return "", nil, false
	}
	if int64(len(body)) > h.cfg.maxBody {
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
	default: // the store failed
		w.Header().Set("Retry-After", "1")
		problem(w, http.StatusServiceUnavailable, "idempotency store unavailable", "")
	}
}

// run serves the first request of a key under its claim, and stores its
// response.
func (h *handler) run(w http.ResponseWriter, r *http.Request, claim *Claim) {
	defer claim.Release(r.Context()) // after a panic or runtime.Goexit; nothing after Complete
	rec := newRecorder(w, h.cfg.maxResponse)
	h.next.ServeHTTP(rec, r.WithContext(claim.Context()))
	if rec.status == 0 && r.Context().Err() == nil && !rec.hijacked {
		rec.WriteHeader(http.StatusOK)
	}
	_ = claim.Complete(r.Context(), Record{ // a failure is reported
		Status:    rec.status,
		Header:    h.stored(rec.header, rec.outer),
		Body:      rec.body,
		Truncated: rec.truncated || rec.hijacked, // a hijacked connection cannot be replayed
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
