// Package dashboard serves a live view of the breakers and pipelines of a
// registry (package registry), and controls to force a breaker, as one
// http.Handler that mounts like net/http/pprof:
//
//	mux.Handle("/debug/resilience/", dashboard.New(registry.Default))
//
// It serves one page (HTML, CSS and a little JavaScript, embedded: no
// framework, nothing fetched from elsewhere), which updates itself from
// server-sent events: a tile per breaker coloured by its state, with
// sparklines of the successes, failures and rejections of the pipelines
// built on it, filter and sort for hundreds of them, and a table per
// pipeline. Under it are a JSON API, api/state (the state once) and
// api/events (the state as server-sent events, every [Interval]), and the
// control, api/mode.
//
// The handler is read-only unless given an authorizer ([WithAuthorizer]):
// without one, every control is refused. A control is a POST with the CSRF
// token of the page (bound to the user the authorizer names) in the
// X-CSRF-Token header, from the same origin (net/http's
// CrossOriginProtection); anything else is refused, and the page shows why.
// A token is good for the Handler that made it (its key is its own, made
// by New): behind a load balancer, serve the page and its controls from
// one replica (sticky sessions, or each replica's own address).
// Names (breaker names are often host names or methods, that is user
// input) are escaped by html/template and set as text by the page, never
// as markup. [AllowedHosts] refuses requests for other host names (DNS
// rebinding). A Handler is safe for concurrent use; [Handler.Close] ends
// the event streams it serves, for http.Server.Shutdown.
package dashboard

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/registry"
)

// Action is what a user asks the authorizer for: to see the controls
// (the zero Action, as the page is served), or to set a breaker's mode.
type Action struct {
	// Breaker is the breaker's name, "" to see the controls.
	Breaker string
	Mode    breaker.Mode
}

// Authorizer says who makes request r and whether they may do a: it
// returns their name (it goes into the event of the change) or an error,
// whose message the page shows. It must be safe for concurrent use.
//
// It must rely on credentials that the browser keeps to the dashboard's
// origin (a session cookie, HTTP authentication, a client certificate),
// not on the caller's network address (r.RemoteAddr, "anyone who reaches
// the internal port"), unless [AllowedHosts] is set: a page of another
// site whose host name resolves to the dashboard's address (DNS
// rebinding) is the same origin for the browser, but not for those
// credentials.
type Authorizer func(r *http.Request, a Action) (who string, err error)

// Option configures a [Handler].
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	authorize Authorizer
	interval  time.Duration
	title     string
	hosts     map[string]bool // nil: any
}

// WithAuthorizer enables the controls, for the users that a allows.
// Default none: the dashboard is read-only and refuses every control. See
// [Authorizer] for what a may rely on.
func WithAuthorizer(a Authorizer) Option {
	return optionFunc(func(c *config) { c.authorize = a })
}

// Interval sets how often the page gets the state: a change shows within
// it and a quarter (the state, encoded once for all the pages open, is
// sent to each for a quarter of it), while reading and encoding the state
// takes less than that: on a 2-core machine, 1,000 tiles at 200 ms and
// 3,000 at the default held, 3,000 at 200 ms did not (265 to 495 ms).
// Default 500 ms. It panics if d is not positive.
func Interval(d time.Duration) Option {
	if d <= 0 {
		panic(fmt.Sprintf("dashboard: Interval(%v): d must be more than 0", d))
	}
	return optionFunc(func(c *config) { c.interval = d })
}

// Title sets the page's title. Default "resiliencekit".
func Title(s string) Option {
	return optionFunc(func(c *config) { c.title = s })
}

// AllowedHosts lists the host names the dashboard answers for (the
// request's Host without its port, such as "dash.internal" or
// "10.0.0.7"), compared without regard to case, the brackets of an IPv6
// address ("[::1]" or "::1") or a final dot: a request for any other
// host is refused with 421 Misdirected Request. It closes DNS rebinding,
// a page of another site whose name resolves to the dashboard's address,
// which the browser takes for the dashboard's own origin. Set it when
// the [Authorizer] trusts the caller's network address. Default none:
// any host.
func AllowedHosts(hosts ...string) Option {
	m := make(map[string]bool, len(hosts))
	for _, h := range hosts {
		m[hostName(h)] = true
	}
	return optionFunc(func(c *config) { c.hosts = m })
}

// Handler serves the dashboard of a registry. Make one with [New].
type Handler struct {
	reg    *registry.Registry
	cfg    config
	secret []byte // keys the CSRF tokens
	origin *http.CrossOriginProtection
	closed chan struct{} // closed by Close: the event streams end
	close  sync.Once

	mu       sync.Mutex
	streams  map[*stream]bool // the event streams being served, for Close to cut
	event    []byte           // the state as last sent to them, one event
	eventAt  time.Time
	gen      uint64     // events encoded
	building sync.Mutex // held while the event is encoded
}

// New returns a Handler for reg, read-only unless [WithAuthorizer] says
// otherwise.
func New(reg *registry.Registry, opts ...Option) *Handler {
	cfg := config{interval: 500 * time.Millisecond, title: "resiliencekit"}
	for _, o := range opts {
		if o != nil {
			o.apply(&cfg)
		}
	}
	return &Handler{reg: reg, cfg: cfg, secret: []byte(rand.Text()), origin: http.NewCrossOriginProtection(), closed: make(chan struct{}),
		streams: map[*stream]bool{}}
}

// Close ends the event streams (api/events) being served, and any asked
// for later: a page open on the dashboard keeps its connection busy, and
// http.Server.Shutdown waits for busy connections, so register it:
//
//	srv.RegisterOnShutdown(h.Close)
//
// A stream between two events ends at once, cleanly; one writing an
// event has closeGrace (1 s) to finish it, and is then cut: a client that
// has stopped reading (one gone without a word, or asleep) holds up
// Shutdown for a second at most. The page and the JSON API are served as
// before. It is safe to call more than once.
func (h *Handler) Close() {
	h.close.Do(func() {
		close(h.closed)
		h.mu.Lock()
		defer h.mu.Unlock()
		for st := range h.streams {
			if st.writing.Load() {
				_ = st.rc.SetWriteDeadline(time.Now().Add(closeGrace))
			}
		}
	})
}

// stream is an event stream being served.
type stream struct {
	rc      *http.ResponseController
	writing atomic.Bool // an event is being written
}

// Errors of refused controls, matched with [errors.Is] on what the page
// shows; their messages are the page's.
var (
	errReadOnly  = errors.New("read-only dashboard: controls need an authorizer (dashboard.WithAuthorizer)")
	errBadToken  = errors.New("missing or wrong CSRF token: reload the page")
	errNotPost   = errors.New("a control must be a POST")
	errNoBreaker = errors.New("no such breaker")
)

// maxForm is the most a control's form may take: room for long names
// (a URL path, a method), percent-encoded.
const maxForm = 64 << 10

// modeTimeout bounds a control's wait for the store, whatever the
// request's context: a user who leaves does not cut a fleet-wide change
// short.
const modeTimeout = 5 * time.Second

// ServeHTTP serves the page at the handler's root (any path ending in a
// slash) and the API under api/.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !h.hostAllowed(r) {
		http.Error(w, "misdirected request: not a host of this dashboard", http.StatusMisdirectedRequest)
		return
	}
	p := r.URL.Path
	switch {
	case strings.HasSuffix(p, "/api/state"):
		h.serveState(w, r)
	case strings.HasSuffix(p, "/api/events"):
		h.serveEvents(w, r)
	case strings.HasSuffix(p, "/api/mode"):
		h.serveMode(w, r)
	case strings.HasSuffix(p, "/"):
		h.servePage(w, r)
	case !strings.Contains(p[strings.LastIndex(p, "/")+1:], "."):
		http.Redirect(w, r, folder(r), http.StatusMovedPermanently)
	default:
		http.NotFound(w, r)
	}
}

// folder is where a request for a path without a trailing slash is
// redirected, for the page's relative links to work: the same path with
// one, on the same site and under the handler. The path is the one the
// client asked for (r.RequestURI), so that a prefix that
// http.StripPrefix took off is kept; it starts with one slash, never
// "//host" or "/\\host", which a browser takes for another site's; and it
// is percent-encoded, so that a tab or a newline, which a browser drops
// from a URL ("/\t/host" is "//host" to it), is no separator.
func folder(r *http.Request) string {
	p := r.URL.Path
	if u, err := url.ParseRequestURI(r.RequestURI); err == nil && strings.HasSuffix(u.Path, p) {
		p = u.Path
	}
	return (&url.URL{Path: "/" + strings.TrimLeft(p, "/\\") + "/"}).EscapedPath()
}

//go:embed page.html
var pageHTML string

var page = template.Must(template.New("page").Parse(pageHTML))

// servePage serves the page, with the controls if the authorizer lets
// the user see them.
func (h *Handler) servePage(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	data := struct {
		Title, Token, Nonce string
		Controls            bool
		IntervalMS          int64
	}{Title: h.cfg.title, Nonce: rand.Text(), IntervalMS: h.cfg.interval.Milliseconds()}
	if h.cfg.authorize != nil {
		if who, err := h.cfg.authorize(r, Action{}); err == nil {
			data.Controls, data.Token = true, h.token(who)
		}
	}
	hd := w.Header()
	hd.Set("Content-Type", "text/html; charset=utf-8")
	hd.Set("Content-Security-Policy", "default-src 'none'; script-src 'nonce-"+data.Nonce+"'; style-src 'nonce-"+data.Nonce+
		"'; connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	noCache(hd)
	if err := page.Execute(w, data); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
	}
}

func noCache(hd http.Header) {
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "no-referrer")
}

// token is the CSRF token of who: an HMAC of who under the handler's key,
// and who, so that a token can be checked before the authorizer is asked
// (tokenUser), and still be bound to the user it names.
func (h *Handler) token(who string) string {
	return hex.EncodeToString(h.mac(who)) + hex.EncodeToString([]byte(who))
}

func (h *Handler) mac(who string) []byte {
	m := hmac.New(sha256.New, h.secret)
	m.Write([]byte(who))
	return m.Sum(nil)
}

// tokenUser returns the user of tok, a token this handler made.
func (h *Handler) tokenUser(tok string) (who string, ok bool) {
	b, err := hex.DecodeString(tok)
	if err != nil || len(b) < sha256.Size {
		return "", false
	}
	who = string(b[sha256.Size:])
	return who, hmac.Equal(b[:sha256.Size], h.mac(who))
}

func (h *Handler) serveState(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	noCache(w.Header())
	_ = json.NewEncoder(w).Encode(view(h.reg.Snapshot()))
}

// serveEvents sends the state at once and then every interval, as
// server-sent events, until the client goes, the handler is closed (a
// stream asked for after Close gets one event), or a write has waited
// writeTimeout for a client that does not read.
func (h *Handler) serveEvents(w http.ResponseWriter, r *http.Request) {
	st := &stream{rc: http.NewResponseController(w)}
	h.mu.Lock()
	h.streams[st] = true
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		delete(h.streams, st)
		h.mu.Unlock()
	}()
	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream")
	noCache(hd)
	t := time.NewTicker(h.cfg.interval)
	defer t.Stop()
	for {
		b, err := h.state()
		if err != nil {
			return
		}
		if !h.send(st, w, b) {
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-h.closed:
			return
		case <-t.C:
		}
	}
}

// send writes event b to st, within writeTimeout (two intervals, if
// longer), or closeGrace once the handler is closed, and reports whether
// it went out.
func (h *Handler) send(st *stream, w http.ResponseWriter, b []byte) bool {
	st.writing.Store(true)
	defer st.writing.Store(false)
	_ = st.rc.SetWriteDeadline(time.Now().Add(max(writeTimeout, 2*h.cfg.interval)))
	select {
	case <-h.closed: // whether Close saw this write or not
		_ = st.rc.SetWriteDeadline(time.Now().Add(closeGrace))
	default:
	}
	if _, err := w.Write(b); err != nil {
		return false
	}
	if err := st.rc.Flush(); err != nil {
		if errors.Is(err, http.ErrNotSupported) {
			// A ResponseWriter that cannot flush (a middleware's wrapper
			// with neither Flush nor Unwrap): the stream carries this one
			// event, and tells the browser to come back for the next
			// after an interval, not its default of seconds.
			_, _ = fmt.Fprintf(w, "retry: %d\n\n", max(1, h.cfg.interval.Milliseconds()))
		}
		return false
	}
	return true
}

// writeTimeout is how long an event stream waits to write an event (or
// two intervals, if longer) for a client that does not read (behind what
// the socket's buffers hold already); closeGrace, once the handler is
// closed.
const (
	writeTimeout = time.Minute
	closeGrace   = time.Second
)

// state returns the state as one server-sent event: encoded once for
// all the event streams, however many are open, and sent to each for a
// quarter of an interval; the streams that find it stale as it is being
// encoded wait for that encoding and take it, whatever it took.
func (h *Handler) state() ([]byte, error) {
	h.mu.Lock()
	b, gen := h.fresh(), h.gen
	h.mu.Unlock()
	if b != nil {
		return b, nil
	}
	h.building.Lock()
	defer h.building.Unlock()
	h.mu.Lock()
	if h.gen != gen { // encoded while this one waited
		b = h.event
	}
	h.mu.Unlock()
	if b != nil {
		return b, nil
	}
	snap := h.reg.Snapshot()
	j, err := json.Marshal(view(snap)) // escapes the line breaks: one data line
	if err != nil {
		return nil, err
	}
	b = fmt.Appendf(make([]byte, 0, len(j)+8), "data: %s\n\n", j)
	h.mu.Lock()
	h.event, h.eventAt = b, snap.At // its age counts from the state's, not from its encoding's end
	h.gen++
	h.mu.Unlock()
	return b, nil
}

// fresh returns the event last encoded if it is to be sent still, else
// nil; h.mu is held.
func (h *Handler) fresh() []byte {
	if h.event != nil && time.Since(h.eventAt) < h.cfg.interval/4 {
		return h.event
	}
	return nil
}

// serveMode sets a breaker's mode: a POST of the form fields name and
// mode, from the same origin, with the user's CSRF token, that the
// authorizer allows.
func (h *Handler) serveMode(w http.ResponseWriter, r *http.Request) {
	who, status, err := h.allow(r)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), modeTimeout)
		err = h.reg.SetMode(ctx, r.PostFormValue("name"), mustMode(r), who)
		cancel()
		switch {
		case errors.Is(err, registry.ErrNotFound):
			status, err = http.StatusNotFound, errNoBreaker
		case err != nil:
			// Set on this replica; the store did not take it fleet-wide.
			status, err = http.StatusBadGateway, fmt.Errorf("set on this replica only: %w", err)
		}
	}
	w.Header().Set("Content-Type", "application/json")
	noCache(w.Header())
	if err != nil {
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
		return
	}
	_ = json.NewEncoder(w).Encode(map[string]string{"ok": "set", "by": who})
}

// hostAllowed reports whether r is for a host of AllowedHosts, if set.
func (h *Handler) hostAllowed(r *http.Request) bool {
	if h.cfg.hosts == nil {
		return true
	}
	host := r.Host
	if hn, _, err := net.SplitHostPort(host); err == nil {
		host = hn
	}
	return h.cfg.hosts[hostName(host)]
}

// hostName is host (without its port) as AllowedHosts compares it: in
// lower case, without the brackets of an IPv6 address or a final dot.
func hostName(host string) string {
	return strings.ToLower(strings.TrimSuffix(strings.Trim(host, "[]"), "."))
}

// allow checks a control request: its method, the origin, the form, the
// token (one this handler made), then asks the authorizer, and checks
// that the token is of the user it names; it returns who makes it. The
// authorizer is never asked for a request without a genuine token.
func (h *Handler) allow(r *http.Request) (who string, status int, err error) {
	if r.Method != http.MethodPost {
		return "", http.StatusMethodNotAllowed, errNotPost
	}
	if h.cfg.authorize == nil {
		return "", http.StatusForbidden, errReadOnly
	}
	if err := h.origin.Check(r); err != nil {
		return "", http.StatusForbidden, fmt.Errorf("refused: %w", err)
	}
	r.Body = http.MaxBytesReader(nil, r.Body, maxForm)
	if err := r.ParseForm(); err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return "", http.StatusRequestEntityTooLarge, fmt.Errorf("form too large: more than %d KB", maxForm>>10)
		}
		return "", http.StatusBadRequest, fmt.Errorf("bad form: %w", err)
	}
	m, err := breaker.ParseMode(r.PostFormValue("mode"))
	if err != nil {
		return "", http.StatusBadRequest, err
	}
	got := r.Header.Get("X-CSRF-Token")
	if _, ok := h.tokenUser(got); !ok {
		return "", http.StatusForbidden, errBadToken
	}
	who, err = h.cfg.authorize(r, Action{Breaker: r.PostFormValue("name"), Mode: m})
	if err != nil {
		return "", http.StatusForbidden, fmt.Errorf("not allowed: %w", err)
	}
	if !hmac.Equal([]byte(got), []byte(h.token(who))) {
		return "", http.StatusForbidden, errBadToken // another user's
	}
	return who, 0, nil
}

// mustMode is the request's mode, checked by allow.
func mustMode(r *http.Request) breaker.Mode {
	m, _ := breaker.ParseMode(r.PostFormValue("mode"))
	return m
}
