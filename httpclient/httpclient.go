// Package httpclient makes outbound HTTP calls resilient: a
// [http.RoundTripper] that runs every request through a pipeline (a time
// budget, a circuit breaker, a jittered retry), so any *http.Client or SDK
// can use it, and a small JSON [Client] on top.
//
//	orders := pipeline.New(pipeline.WithBreaker(breaker.New("orders")), pipeline.WithRetry(retrypolicy.New()))
//	client := httpclient.New(httpclient.WithPipeline(orders))
//	err := client.PostJSON(ctx, ordersURL, newOrder, &created, httpclient.IdempotencyKey(newOrder.Key))
//
//	// or any *http.Client, such as an SDK's:
//	hc := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(orders))}
//
// Connection errors, resets, timeouts and the statuses 429, 502, 503 and 504
// are transient: retried, with a Retry-After header honoured up to the
// retry's MaxDelay and the budget. Other 4xx statuses are the caller's fault
// and 500, 501 and other 5xx are failures that a retry will not fix: neither
// is retried ([ClassifyStatus] changes the class of a status). An error
// that the client made itself, before or after the exchange (a URL with
// an unsupported scheme, no host or a port that does not parse, an
// invalid header, a request body of the caller's that fails to read, or
// that is so slow to give bytes that the call's time runs out while
// net/http waits on it, most of the attempt, before its end, a server
// certificate it does not trust, TLS versions its configuration leaves
// none of, a response header over its limit), is neither retried nor
// counted by the breaker: its class is resilience.ClassRejected, as is
// the [Client]'s own encoding error. What stands between the client and
// the dependency counts as the dependency: a proxy that refuses the
// connection, a name that does not resolve (a misspelled host counts
// against the breaker of the pipeline it goes through: [BreakerPerHost]
// keeps that to its own name), an error of the caller's own client
// certificate callback, which crypto/tls returns as it came. Only
// idempotent methods (GET, HEAD, OPTIONS, PUT, DELETE, and those added by
// [RetryMethods]) are retried, and others such as POST or PATCH only when
// they carry an Idempotency-Key header, sent unchanged on every attempt;
// [AutoIdempotencyKey] adds one.
// A 409 with a Retry-After to a request with a key is package
// idempotency's "the key's first request still runs": retried after it, so
// that a retry that overtook a slow first attempt gets its answer, and
// counted by the breaker neither as a failure nor as a success
// (resilience.ClassPending).
//
// Each attempt sends the time left in its budget in the header of package
// deadline, so the next service can stop when nobody waits any more. The
// request body is rewound for each attempt (one without GetBody is kept in
// memory, up to [MaxBufferedBody], see there); the body of a transient failure is read
// up to [DrainLimit], for [DrainTimeout] at most, before the next attempt,
// so the connection is reused.
// The last answer is handed back as it came, its body unread and whole,
// unless the caller's context is done, whose error then comes back as
// net/http would return it; a failed one carries this hop's "don't retry"
// signal (retrysignal.NoRetryHeader) if the Transport did what retrying
// would (retrysignal.Retried), and none otherwise, whatever the
// dependency sent: a reverse proxy on the Transport
// (httputil.ReverseProxy) passes it to its caller, so that two layers do
// not both retry. A call that got no answer (a refused or reset
// connection, a timeout, an open breaker) returns an error, which the
// proxy's ErrorHandler answers: set it to retrysignal.ProxyErrorHandler,
// or the proxy's default answers 502 without the signal, and its caller
// retries too. The caller's request is never modified.
//
// With [BreakerPerHost], each scheme, host and port gets a breaker of its
// own, at most [MaxBreakers] of them, so that one dead host does not open
// the breaker for the others.
//
// Each attempt also says which it is (retrysignal.AttemptHeader), and an
// answer from a trusted service that asks not to be retried
// (retrysignal.NoRetryHeader, see [TrustNoRetry]) is not: retries happen
// at one layer of a chain of services, not at every one.
package httpclient

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/deadline"
	"github.com/resiliencekit/resiliencekit/idempotencykey"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/retrysignal"
)

// DrainLimit is how much of a failed response's body is read to let its
// connection be reused: before a retry, an error body up to this size is
// read whole, a longer one is cut and its connection closed. The last
// answer is not read: it is handed back as it came.
const DrainLimit = 256 << 10

// DrainTimeout is how long a failed response's body is read before a
// retry (see [DrainLimit]): past it, the body is closed with its
// connection, and the retry goes on.
const DrainTimeout = 50 * time.Millisecond

// ErrBodyNotRetried is joined to the error of a request whose body could
// not be kept for a retry: it had no GetBody, and its length was unknown
// or over [MaxBufferedBody] (see there), so its one attempt was its last.
var ErrBodyNotRetried = errors.New("httpclient: request body not kept for a retry")

// ErrNoIdempotencyKey is matched by the error of a request that failed in a
// way a retry might fix (a transient error) and was sent once all the
// same, because its method is retried only with an Idempotency-Key header
// (see [RetryMethods], [IdempotencyKey], [AutoIdempotencyKey]). The error's
// message ends with "not retried: POST without Idempotency-Key", naming
// the method.
var ErrNoIdempotencyKey = errors.New("httpclient: not retried without an Idempotency-Key")

// notRetriedError is a transient failure of a request that was not retried
// for want of an idempotency key.
type notRetriedError struct {
	err    error
	method string
}

func (e *notRetriedError) Error() string {
	return e.err.Error() + " (not retried: " + e.method + " without " + idempotencykey.Header + ")"
}

func (e *notRetriedError) Unwrap() []error { return []error{e.err, ErrNoIdempotencyKey} }

// StatusError is an HTTP answer that the retry stage treated as an error:
// a transient status, or any other status of 400 and above. It carries a
// bounded excerpt of the body when the [Client] made it.
type StatusError struct {
	// StatusCode is the response's status code, such as 503.
	StatusCode int
	// Status is the response's status line, such as "503 Service Unavailable".
	Status string
	// Method and URL identify the request; the URL has no query or password.
	Method, URL string
	// Header is the response's header.
	Header http.Header
	// Body is the start of the response's body, at most [MaxErrorBody]
	// bytes; the [Client] reads it, the [Transport] leaves the body to its
	// caller and this empty.
	Body []byte
	// Truncated means the body was longer than Body.
	Truncated bool

	class    resilience.Class
	response *http.Response
}

// Error returns the method, URL and status.
func (e *StatusError) Error() string {
	return e.Method + " " + e.URL + ": " + e.Status
}

// ResilienceClass returns the status's class: by default transient for
// 429, 502, 503 and 504, permanent for other 4xx, terminal for other 5xx,
// as changed by [ClassifyStatus]; terminal for a transient or terminal
// status that a trusted service asked not to retry ([TrustNoRetry]); and
// permanent for a status that the [Client] fails (outside 2xx) but the
// [Transport] classes as a success.
func (e *StatusError) ResilienceClass() resilience.Class { return e.class }

// HTTPStatus returns StatusCode, so that a service passing the failure on
// (retrysignal.WriteError) answers with the same status.
func (e *StatusError) HTTPStatus() int { return e.StatusCode }

// Option configures a [Transport] or a [Client].
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	base         http.RoundTripper
	pipeline     *pipeline.Pipeline
	retryMethods methodSet
	classes      [600]resilience.Class // by status, 100 to 599
	autoKey      bool
	maxErrorBody int
	maxBuffered  int64
	perHost      func(authority string) *breaker.Breaker
	maxBreakers  int
	trustNoRetry func(*url.URL) bool
	jar          http.CookieJar
	redirect     func(req *http.Request, via []*http.Request) error
}

// Base sets the RoundTripper that makes each attempt. Default
// [http.DefaultTransport]; nil keeps the default.
func Base(rt http.RoundTripper) Option {
	return optionFunc(func(c *config) {
		if rt != nil {
			c.base = rt
		}
	})
}

// WithPipeline runs every request through p: its time budget, breaker,
// retry and attempt timeout, the budget and the attempt timeout lasting
// until the response body is closed. Use one Pipeline per dependency,
// shared with its other callers. Default: a pipeline that retries by
// retrypolicy.New() (4 attempts, 100 ms base, 10 s cap, full jitter),
// without a breaker or time budget; nil keeps the default.
//
// The retries are p's: a p without a retry stage ([pipeline.WithRetry])
// makes a client that sends every request once, whatever its method or
// idempotency key. [New] and [NewTransport] say so in a log line
// ([slog.Default], level Info) when given one.
func WithPipeline(p *pipeline.Pipeline) Option {
	return optionFunc(func(c *config) {
		if p != nil {
			c.pipeline = p
		}
	})
}

// BreakerPerHost gives each authority (scheme, host and port, such as
// "https://api.example.com:443") a breaker of its own, made by newBreaker
// on the authority's first request, in place of the pipeline's breaker, so
// that one dead host does not fail the calls to the others. The pipeline's
// other stages stay as they are. At most [MaxBreakers] authorities get a
// breaker (a [breaker.Group]); requests to more go through the pipeline
// without a breaker: one breaker shared by those hosts would let a dead
// one fail the calls to the others (review113), which is what a breaker
// per host is for. newBreaker may share state across replicas
// ([breaker.Shared]).
// Default off: one breaker, the pipeline's, for every host. It panics if
// newBreaker is nil.
func BreakerPerHost(newBreaker func(authority string) *breaker.Breaker) Option {
	if newBreaker == nil {
		panic("httpclient: BreakerPerHost(nil): newBreaker must not be nil")
	}
	return optionFunc(func(c *config) { c.perHost = newBreaker })
}

// MaxBreakers bounds the breakers that [BreakerPerHost] makes, one per
// authority: requests to an authority past the bound go through the
// pipeline without a breaker. Default 1024. It panics if n < 1.
func MaxBreakers(n int) Option {
	if n < 1 {
		panic(fmt.Sprintf("httpclient: MaxBreakers(%d): n must be 1 or more", n))
	}
	return optionFunc(func(c *config) { c.maxBreakers = n })
}

// methodSet is a set of the methods of net/http's Method constants.
type methodSet uint16

// httpMethods are net/http's Method constants, by their bit in a methodSet.
var httpMethods = [...]string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
	http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace}

// methodOf returns the set of m alone, or the empty set if m is not one of
// net/http's Method constants.
func methodOf(m string) methodSet {
	if i := slices.Index(httpMethods[:], m); i >= 0 {
		return 1 << i
	}
	return 0
}

// has reports whether m is in s.
func (s methodSet) has(m string) bool { return s&methodOf(m) != 0 }

// defaultRetryMethods are the methods retried without an idempotency key
// unless [RetryMethods] adds more: those RFC 9110 calls idempotent, but
// TRACE.
var defaultRetryMethods = methodOf(http.MethodGet) | methodOf(http.MethodHead) | methodOf(http.MethodOptions) |
	methodOf(http.MethodPut) | methodOf(http.MethodDelete)

// RetryMethods adds methods, such as "PATCH" for a service whose PATCH is
// idempotent, to those retried without an idempotency key: GET, HEAD,
// OPTIONS, PUT and DELETE. Calls with an idempotency key are retried
// whatever their method. It may be given more than once. It panics for a
// method that is not one of net/http's Method constants (GET, HEAD, POST,
// PUT, PATCH, DELETE, CONNECT, OPTIONS, TRACE), in upper case.
func RetryMethods(methods ...string) Option {
	var set methodSet
	for _, m := range methods {
		bit := methodOf(m)
		if bit == 0 {
			panic(fmt.Sprintf("httpclient: RetryMethods(%q): not an HTTP method", m))
		}
		set |= bit
	}
	return optionFunc(func(c *config) { c.retryMethods |= set })
}

// ClassifyStatus sets the class of the HTTP status status: transient
// (retried, with its Retry-After honoured; a breaker failure), permanent
// (the caller's fault: neither), terminal (not retried, a breaker failure),
// canceled (neither retried nor counted), pending (retried, with its
// Retry-After honoured; not counted), or success (the answer is the
// call's result: not retried, a breaker success; the [Client] still fails
// a status outside 2xx, with a permanent [StatusError]). It applies on top
// of the defaults and of earlier calls, and may be given more than once.
// Default: 429, 502, 503 and 504 transient; other 4xx permanent (but a 409
// with a Retry-After to a request with an idempotency key, which is
// pending); other 5xx terminal; 1xx, 2xx and 3xx success. It panics for a
// status outside 100 to 599, a 1xx, 2xx or 3xx status with a class other
// than success, or a class that is none of these.
func ClassifyStatus(status int, class resilience.Class) Option {
	switch {
	case status < 100 || status > 599:
		panic(fmt.Sprintf("httpclient: ClassifyStatus(%d, %v): status must be 100 to 599", status, class))
	case class > resilience.ClassCanceled && class != resilience.ClassPending:
		panic(fmt.Sprintf("httpclient: ClassifyStatus(%d, %v): class must be success, transient, permanent, terminal, canceled or pending", status, class))
	case status < 400 && class != resilience.ClassSuccess:
		panic(fmt.Sprintf("httpclient: ClassifyStatus(%d, %v): a 1xx, 2xx or 3xx status is a success", status, class))
	}
	return optionFunc(func(c *config) { c.classes[status] = class })
}

// AutoIdempotencyKey gives every POST or PATCH without an Idempotency-Key
// header a fresh random (version 4 UUID) key, the same on all its attempts,
// so that it can be retried. Use it only against servers that honour the
// header. Default off.
func AutoIdempotencyKey() Option {
	return optionFunc(func(c *config) { c.autoKey = true })
}

// MaxErrorBody sets how many bytes of a failed response's body a
// [StatusError] of the [Client] keeps. Default 64 KiB. It panics if n < 1.
func MaxErrorBody(n int) Option {
	if n < 1 {
		panic(fmt.Sprintf("httpclient: MaxErrorBody(%d): n must be 1 or more", n))
	}
	return optionFunc(func(c *config) { c.maxErrorBody = n })
}

// MaxBufferedBody sets how long a request body without GetBody (any reader
// but a *bytes.Buffer, *bytes.Reader or *strings.Reader) may be for the
// transport to keep it in memory so that the request can be retried. Such
// a body of a known length (Request.ContentLength above 0) and at most n
// is read whole before the first attempt; a longer one is sent once, as it
// is read, as net/http sends it. One of unknown length may be a stream
// that waits for the response (a full-duplex exchange over HTTP/2, or
// HTTP/1.1 with http.ResponseController's EnableFullDuplex), which reading
// ahead would hold up for good: it is sent as it is read, and what the
// attempts read is kept, up to n, for a retry, which sends what was kept,
// then the rest as it is read, once no earlier attempt still reads it
// (net/http may, for a moment, after an answer that came before the whole
// body was sent). After an upload the server cut (the write failed, or
// net/http read the reset first), the rest of the body is read for
// [DrainTimeout] at most: one that ends by then within n bytes is sent
// again (a server that died mid-upload); one that is longer, does not end
// by then, or fails to read, is not, and the cut counts as the server
// refusing it (class rejected, as nginx cuts a body over its limit). A
// body of the caller's whose Read is under way as an attempt's context
// ends, or as the caller's ends while it is read into memory, is closed,
// so that one whose writer stalled does not hold the request (net/http
// waits for it for good). A request whose body is not retried fails, where a retry would
// have followed, with an error that also matches [ErrBodyNotRetried], and
// the pipeline reports [resilience.EventNotRetried]. A body of a known
// length that waits for the response is read ahead all the same: give it a
// GetBody, or set ContentLength to -1. Default 1 MiB; 0 buffers nothing.
// It panics if n < 0.
func MaxBufferedBody(n int64) Option {
	if n < 0 {
		panic(fmt.Sprintf("httpclient: MaxBufferedBody(%d): n must be 0 or more", n))
	}
	return optionFunc(func(c *config) { c.maxBuffered = n })
}

// TrustNoRetry sets which services' "don't retry" signal
// (retrysignal.NoRetryHeader) is honoured: an answer that carries it from a
// service for whose URL fn reports true is not retried (it is terminal for
// the call: still a breaker failure, its Retry-After ignored). Default: the
// services of the same network, whose host is a loopback or private IP
// address, "localhost", a name without a dot (but a number, which the C
// library's resolver reads as an address, or one that ends with the root's
// dot, a top-level domain such as "ai."), or a name under .local,
// .internal or .svc.cluster.local; never an arbitrary internet server, nor
// a name with a character outside ASCII, which net/http maps (IDNA) before
// it dials. Trusting a service trusts what answers through it: a plain
// proxy or gateway (nginx, an httputil.ReverseProxy on a plain Transport)
// relays its upstream's signal; one in front of services its callers
// should not trust drops the header (nginx's proxy_hide_header, a
// ModifyResponse that deletes it), or runs on this package's Transport,
// which sets its own.
// Opt out with a function that reports false.
func TrustNoRetry(fn func(u *url.URL) bool) Option {
	if fn == nil {
		panic("httpclient: TrustNoRetry(nil): fn must not be nil")
	}
	return optionFunc(func(c *config) { c.trustNoRetry = fn })
}

// sameNetwork is TrustNoRetry's default: a host of the same network.
func sameNetwork(u *url.URL) bool {
	name := strings.ToLower(u.Hostname())
	host := strings.TrimSuffix(name, ".")
	absolute := host != name // "ai." is a top-level domain, never a short local name
	if host == "" {
		return false
	}
	for i := range len(host) {
		if host[i] >= utf8.RuneSelf {
			return false // net/http maps it (IDNA) before it dials: "ai。" is "ai.", "example．com" example.com
		}
	}
	if ip, zone, _ := strings.Cut(host, "%"); zone != "" || net.ParseIP(ip) != nil {
		parsed := net.ParseIP(ip)
		return parsed != nil && (parsed.IsLoopback() || parsed.IsPrivate())
	}
	return host == "localhost" || !absolute && !strings.Contains(host, ".") && !inetNumber(host) ||
		strings.HasSuffix(host, ".local") || strings.HasSuffix(host, ".internal") || strings.HasSuffix(host, ".svc.cluster.local")
}

// inetNumber reports whether host, without a dot, is a number that the C
// library's resolver (inet_aton) reads as an IPv4 address, as
// "134744072" or "0x8080808" is 8.8.8.8: not a name of the same network.
func inetNumber(host string) bool {
	digits := "0123456789"
	if h, ok := strings.CutPrefix(host, "0x"); ok {
		host, digits = h, "0123456789abcdef"
	}
	return host != "" && strings.Trim(host, digits) == ""
}

// WithJar sets the cookie jar of the [Client]'s *http.Client. Default none.
func WithJar(jar http.CookieJar) Option {
	return optionFunc(func(c *config) { c.jar = jar })
}

// CheckRedirect sets the redirect policy of the [Client]'s *http.Client
// (see [http.Client.CheckRedirect]); each request of a redirect chain runs
// through the pipeline on its own. Default net/http's: follow up to 10.
// A redirect it refuses (its error, or the 11th) fails the call with its
// error and a [*StatusError] of the 3xx not followed, of class permanent:
// no retry changes the answer; a policy's error that is the caller's
// context's is left as it is. A Location that does not parse, or that
// names a scheme or an address the Transport cannot send to, fails the
// call with an error of class terminal (502 for retrysignal.Status).
func CheckRedirect(fn func(req *http.Request, via []*http.Request) error) Option {
	return optionFunc(func(c *config) { c.redirect = fn })
}

var defaultPipeline = pipeline.New(pipeline.WithRetry(retrypolicy.New()))

func newConfig(opts []Option) *config {
	c := &config{
		base:         http.DefaultTransport,
		pipeline:     defaultPipeline,
		maxErrorBody: 64 << 10,
		maxBuffered:  1 << 20,
		maxBreakers:  1024,
		retryMethods: defaultRetryMethods,
		trustNoRetry: sameNetwork,
	}
	for status := 400; status < len(c.classes); status++ {
		c.classes[status] = resilience.ClassPermanent
		if status >= 500 {
			c.classes[status] = resilience.ClassTerminal
		}
	}
	for _, status := range []int{http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout} {
		c.classes[status] = resilience.ClassTransient
	}
	for _, o := range opts {
		if o != nil {
			o.apply(c)
		}
	}
	return c
}

var defaultConfig = newConfig(nil)

// Transport is an [http.RoundTripper] that runs each request through a
// pipeline: a time budget, a breaker and a retry. It is safe for concurrent
// use. The zero Transport works as NewTransport().
type Transport struct {
	cfg       *config
	breakers  *breaker.Group[string] // by authority, with BreakerPerHost
	pipelines sync.Map               // of each of breakers' breakers: *breaker.Breaker to *pipeline.Pipeline
	unguarded *pipeline.Pipeline     // with BreakerPerHost, for the authorities past MaxBreakers: no breaker
}

// NewTransport returns a Transport configured by opts.
func NewTransport(opts ...Option) *Transport {
	t := &Transport{cfg: newConfig(opts)}
	if !t.cfg.pipeline.Retries() {
		slog.Default().Info("httpclient: the pipeline has no retry stage (pipeline.WithRetry): every request is sent once")
	}
	if cfg := t.cfg; cfg.perHost != nil {
		t.unguarded = cfg.pipeline.With(pipeline.WithBreaker(nil))
		t.breakers = breaker.NewGroup(cfg.maxBreakers, func(auth string) *breaker.Breaker {
			b := cfg.perHost(auth)
			if _, ok := t.pipelines.Load(b); !ok { // newBreaker may give several authorities one breaker
				t.pipelines.Store(b, cfg.pipeline.With(pipeline.WithBreaker(b)))
			}
			return b
		})
	}
	return t
}

func (t *Transport) config() *config {
	if t.cfg == nil {
		return defaultConfig
	}
	return t.cfg
}

// CloseIdleConnections closes the idle connections of the base
// RoundTripper, if it has that method, as [http.Client.CloseIdleConnections]
// asks of its transport. Safe for concurrent use.
func (t *Transport) CloseIdleConnections() {
	if c, ok := t.config().base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// RoundTrip sends req through the stages. When the last attempt got an
// HTTP answer, that answer is returned as it came, body unread, as from
// any RoundTripper; otherwise the error says why (errors.Is works with
// [breaker.ErrOpen], [retrypolicy.ErrMaxAttempts], context errors). A
// request whose context is done returns the context's error, as net/http
// does, even if an earlier attempt got an answer.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.do(req)
	if resp != nil {
		return resp, nil
	}
	return nil, err
}

// redirectedKey is the key of req, a request that follows a redirect,
// whose caller's key was key: net/http's Client copies the header onto
// it, and a server that honours keys binds a key to one request (method,
// path, query, body), so that the redirected request with the same key is
// refused as the key reused (422), or, redirected to the same path on
// another host, is answered with the stored redirect until the client
// stops following. Each hop gets a key of its own, drawn from the
// caller's and the URL: the same on every retry of the call, so that a
// hop that ran replays as the first does.
func redirectedKey(key string, req *http.Request) string {
	sum := sha256.Sum256([]byte(key + "\x00" + req.Method + " " + req.URL.String()))
	return "redirected-" + hex.EncodeToString(sum[:16])
}

// do is RoundTrip that also returns the error for a failed status, with
// its response.
func (t *Transport) do(req *http.Request) (*http.Response, error) {
	cfg := t.config()
	var key string
	if v := req.Header[idempotencykey.Header]; len(v) > 0 { // as Get, without canonicalizing a canonical key
		key = v[0]
	} else {
		key = foldedKey(req.Header)
	}
	if key == "" && cfg.autoKey && (req.Method == http.MethodPost || req.Method == http.MethodPatch) {
		key = uuid.NewString()
	} else if key != "" && req.Response != nil {
		key = redirectedKey(key, req)
	}
	retryable := cfg.retryMethods.has(req.Method) || key != ""
	a := &attempt{cfg: cfg, req: req, key: [1]string{key}}
	if err := a.bufferBody(retryable); err != nil {
		return nil, err
	}
	opts := []pipeline.CallOption{discardResponse}
	if a.once = !retryable || !a.rewindable; a.once {
		opts = append(opts, pipeline.SingleAttempt())
	}
	p := t.pipelineFor(req.URL)
	a.p, a.max = p, 1               // a SingleAttempt call's; another's is read as it is sent
	retries := p.MaxAttempts() != 1 // before the call, which may open the breaker
	var stop func() bool
	if a.replay != nil {
		stop = context.AfterFunc(req.Context(), a.replay.abort)
	}
	resp, release, err := pipeline.DoStream(req.Context(), p, a.run, opts...)
	switch {
	case a.replay != nil:
		stop()
		a.replay.finish()
	case a.hasBody && !a.handed.Load():
		// A RoundTripper always closes the body: here if the attempts sent
		// copies, or if none was sent; a body handed as it is to the one
		// attempt is the base's to close, which may be after RoundTrip
		// returns (it may still be sending it, full duplex).
		req.Body.Close()
	}
	if retryable && !a.rewindable && err != nil && req.Context().Err() == nil && resilience.Classify(err).Retryable() {
		err = errors.Join(err, ErrBodyNotRetried) // the body was why it was not retried
	}
	if !retryable && err != nil && req.Context().Err() == nil && resilience.Classify(err).Retryable() && retries {
		err = &notRetriedError{err: err, method: req.Method} // the method was why
	}
	if err != nil && req.Response != nil && unsendable(err) { // a redirect's: the URL is the dependency's Location
		err = badRedirect{err}
	}
	failed := a.finish()
	var back *http.Response // the last answer, handed back as it came
	if se := (*StatusError)(nil); err != nil && errors.As(err, &se) && req.Context().Err() == nil {
		back = se.response
	}
	handed := false
	for _, r := range failed { // a hedge's failures, whether its twin succeeded or not
		if r == back {
			handed = true
		} else {
			r.Body.Close()
		}
	}
	if err == nil {
		resp.Body = a.releaseBody(resp.Body, release, nil)
		return resp, nil
	}
	if handed {
		// This hop's own signal, not the dependency's: a reverse proxy on
		// the Transport passes it to its caller, which then retries only
		// what this hop did not.
		signal := retrysignal.Retried(err)
		if v := back.Header.Values(retrysignal.NoRetryHeader); signal && (len(v) != 1 || v[0] != "1") || !signal && len(v) > 0 {
			back.Header = back.Header.Clone() // the base's map may be another's too
			if back.Header == nil {
				back.Header = http.Header{}
			}
			if signal {
				back.Header.Set(retrysignal.NoRetryHeader, "1")
			} else {
				back.Header.Del(retrysignal.NoRetryHeader)
			}
		}
		back.Body = a.releaseBody(back.Body, release, err)
		return back, err
	}
	release()
	return nil, err
}

// discardResponse closes the response of a hedged attempt that is not
// returned: a loser's, or one that came after its twin had won.
var discardResponse = pipeline.Discard(func(r *http.Response) {
	if r != nil {
		r.Body.Close()
	}
})

// pipelineFor returns the pipeline for a request to u: the configured
// one, or with BreakerPerHost the one with u's authority's breaker. A URL
// that net/http will not send (a scheme but http and https, no host) gets
// the configured one: the caller's mistakes take no breaker of a host, of
// which there are at most MaxBreakers.
func (t *Transport) pipelineFor(u *url.URL) *pipeline.Pipeline {
	if t.breakers == nil || u == nil || u.Hostname() == "" || !strings.EqualFold(u.Scheme, "http") && !strings.EqualFold(u.Scheme, "https") {
		return t.config().pipeline
	}
	b, ok := t.breakers.Get(authority(u))
	if !ok {
		return t.unguarded // past MaxBreakers
	}
	p, _ := t.pipelines.Load(b) // stored before the Group handed b out
	return p.(*pipeline.Pipeline)
}

// authority returns scheme://host:port of u, with the scheme's default
// port if u has none.
func authority(u *url.URL) string {
	scheme := strings.ToLower(u.Scheme)
	port := u.Port()
	if port == "" {
		port = "80"
		if scheme == "https" {
			port = "443"
		}
	}
	return scheme + "://" + net.JoinHostPort(strings.ToLower(u.Hostname()), port)
}

// attempt makes the attempts of one request.
type attempt struct {
	cfg        *config
	req        *http.Request
	key        [1]string // the Idempotency-Key, if any: every attempt's header value
	hasBody    bool
	rewindable bool
	once1      io.ReadCloser // the body sent once, as it is
	handed     atomic.Bool   // once1 went to an attempt: the base's to close
	replay     *replay       // the body of unknown length, sent as it is read
	once       bool          // sent once: not retried, whatever its error
	buffered   bool          // getBody gives copies of our own, which cannot fail
	getBody    func() (io.ReadCloser, error)
	max        int                // the most attempts there will be, read as the first is sent; under mu
	p          *pipeline.Pipeline // the one the attempts run through: it tells its hedges

	mu     sync.Mutex       // hedged attempts run at once
	n      int              // attempts made
	failed []*http.Response // the failed answers of the last attempt and its hedges, bodies not yet closed
	errs   []error          // their errors, one an answer
	done   bool             // the request has returned: answers that come late are closed

	body  releaseBody // the body of the answer returned
	first [1]string   // the first attempt's Request-Attempt header value
}

// finish marks the request as returned and takes the failed answers not
// yet closed: one of them may be the answer to hand back.
func (a *attempt) finish() []*http.Response {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.done = true
	failed := a.failed
	a.failed, a.errs = nil, nil
	return failed
}

// bufferBody makes the request's body rewindable, if it may be retried:
// by its GetBody, or by keeping it in memory if its length is known and at
// most MaxBufferedBody. The attempts send copies, and the caller's body is
// closed when the request is done; a body sent once is handed as it is to
// its attempt, whose base closes it.
func (a *attempt) bufferBody(retryable bool) error {
	r := a.req
	a.hasBody = r.Body != nil && r.Body != http.NoBody
	a.rewindable = true
	switch {
	case !a.hasBody:
		return nil
	case r.GetBody != nil:
		// The first attempt sends the body as it is, as net/http does: the
		// caller may have wrapped it since GetBody was set (to fill its
		// trailers at EOF, or a RoundTripper above that compressed it);
		// GetBody makes the copies of the retries and hedges.
		a.once1, a.getBody = r.Body, a.thenGetBody
		return nil
	case !retryable || r.ContentLength > a.cfg.maxBuffered:
		a.rewindable = false
		a.once1, a.getBody = r.Body, a.handOver
		return nil
	case r.ContentLength <= 0: // unknown: perhaps a stream that waits for the answer
		a.replay = &replay{src: r.Body, max: a.cfg.maxBuffered}
		a.getBody = a.replay.next
		return nil
	}
	// A body that stalls is closed as the caller's context ends (net/http
	// would wait for it for good).
	stop := context.AfterFunc(r.Context(), func() { r.Body.Close() })
	head, err := io.ReadAll(io.LimitReader(r.Body, plusOne(a.cfg.maxBuffered)))
	if !stop() { // closed by the AfterFunc: a second Close may panic (review170)
		return fmt.Errorf("httpclient: read request body: %w", context.Cause(r.Context()))
	}
	if err != nil {
		r.Body.Close()
		// The caller's reader failed: nothing was sent, and the dependency
		// is not at fault.
		return resilience.Rejected(own(fmt.Errorf("httpclient: read request body: %w", err)))
	}
	if n := int64(len(head)); n < r.ContentLength {
		r.Body.Close()
		// Shorter than its ContentLength: net/http would refuse it as it
		// sent it, with this error or, as it closes the connection, the
		// read's that it cut. Not sent: the caller's error.
		return resilience.Rejected(own(fmt.Errorf("http: ContentLength=%d with Body length %d", r.ContentLength, n)))
	}
	if int64(len(head)) <= a.cfg.maxBuffered {
		a.getBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(head)), nil }
		a.buffered = true
		return nil
	}
	// Longer than its ContentLength: sent once, what was read first
	// included (net/http refuses it, the caller's error).
	a.rewindable = false
	a.once1 = readCloser{io.MultiReader(bytes.NewReader(head), r.Body), r.Body}
	a.getBody = a.handOver
	return nil
}

// unrepeatable marks err, the failure of an attempt whose body cannot be
// sent again whole (see replay), as one that no other attempt may follow,
// if it would have been retried.
func unrepeatable(err error) error {
	if !resilience.Classify(err).Retryable() {
		return err
	}
	return resilience.Unrepeatable(errors.Join(err, ErrBodyNotRetried))
}

// thenGetBody is the GetBody of a body the request's GetBody rewinds: the
// caller's body itself for the attempt that comes first, which the base
// then closes, and the request's GetBody's copies for the others.
func (a *attempt) thenGetBody() (io.ReadCloser, error) {
	if a.handed.CompareAndSwap(false, true) {
		return a.once1, nil
	}
	return a.req.GetBody()
}

// handOver is the GetBody of a body sent once, by its one attempt: the
// caller's body, which the base then closes.
func (a *attempt) handOver() (io.ReadCloser, error) {
	a.handed.Store(true)
	return a.once1, nil
}

// readCloser reads from one reader and closes another.
type readCloser struct {
	io.Reader
	io.Closer
}

func (a *attempt) run(ctx context.Context) (*http.Response, error) {
	hedge := a.p.IsHedge(ctx) // a twin of attempt n: its number, marked
	a.mu.Lock()
	var prev []*http.Response
	var prevErrs []error
	if !hedge { // attempt n-1 and its hedges are over: the race chose among their answers
		a.n++
		prev, prevErrs, a.failed, a.errs = a.failed, a.errs, nil, nil
		if a.n == 1 && !a.once {
			// Read as the call is sent, not before it: a call that waited
			// for an open breaker (WaitWhenOpen) and was let through once it
			// closed makes every attempt of the policy.
			a.max = a.p.MaxAttempts()
		}
	}
	n, most := a.n, a.max
	a.mu.Unlock()
	var body io.ReadCloser
	if a.hasBody {
		var err error
		if body, err = a.getBody(); err != nil {
			err = fmt.Errorf("httpclient: rewind request body: %w", err)
			if len(prev) > 0 {
				// A retry not sent: the answers before it stay the call's,
				// to hand back as net/http would have (review114: they
				// were drained and replaced by this error).
				a.mu.Lock()
				a.failed, a.errs = prev, prevErrs
				a.mu.Unlock()
				return nil, resilience.Rejected(errors.Join(slices.Concat(prevErrs, []error{ErrBodyNotRetried, own(err)})...))
			}
			return nil, resilience.Rejected(own(err))
		}
	}
	for _, r := range prev {
		drain(ctx, r.Body)
	}
	r := a.request(ctx, n, most, hedge)
	var cb *callerBody
	if a.hasBody {
		if a.buffered {
			r.Body = body
		} else {
			cb = &callerBody{ReadCloser: body, want: r.ContentLength, start: time.Now(), reading: -1} // its read errors are the caller's
			if a.replay != nil {
				cb.stop = a.replay.abort
			}
			r.Body = cb
			defer context.AfterFunc(ctx, func() {
				// A stream kept for a retry stays open at an attempt
				// timeout: the retry sends what was kept, then the rest.
				if a.replay == nil || context.Cause(ctx) != pipeline.ErrAttemptTimeout {
					cb.stalled()
				}
			})()
		}
	}
	resp, err := a.cfg.base.RoundTrip(r)
	if err != nil {
		if cb != nil && cb.short.Load() {
			// Shorter than its ContentLength: net/http's error says so, or,
			// as it closes the connection, may be the read's that it cut.
			return nil, resilience.Rejected(own(err))
		}
		if cb != nil && ctx.Err() != nil && context.Cause(ctx) != pipeline.ErrAttemptTimeout && cb.slow() {
			// The call's time ran out while net/http waited, most of the
			// attempt, for the caller's body to give bytes: the caller's
			// doing, not the server's (review169). An attempt timeout is
			// not: the server may have been slow too, and a retry, which
			// sends what was kept at once, may complete (review81).
			return nil, resilience.Rejected(own(&bodyError{err: err}))
		}
		if a.replay != nil && ctx.Err() == nil {
			// A stream's upload that the server cut may come back as the
			// write's error or as the reset that net/http read first; its
			// length tells a refusal from a failure (canReplay).
			cut := cutWrite(err) || resetRead(err)
			if !a.replay.canReplay(ctx, cut) {
				if cut { // sent once after all: the server refusing it
					return nil, unrepeatable(resilience.Rejected(err))
				}
				return nil, unrepeatable(classify(err, a.hasBody, true))
			}
		}
		if ctx.Err() == nil && proxyError(a.cfg.base, r, err) {
			return nil, resilience.Rejected(own(err))
		}
		return nil, classify(err, a.hasBody, a.once)
	}
	if a.cfg.class(resp.StatusCode) == resilience.ClassSuccess {
		return resp, nil
	}
	err = a.cfg.statusError(r, resp, hedge)
	if a.replay != nil && ctx.Err() == nil && resilience.Classify(err).Retryable() && !a.replay.canReplay(ctx, false) {
		err = unrepeatable(err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.done {
		resp.Body.Close() // a hedge's answer, after the request returned
		return nil, err
	}
	// Unread, to be handed back as it came if no attempt follows and the
	// race chooses it: a twin's may be chosen instead (the longer
	// Retry-After, or an answer not to retry).
	a.failed, a.errs = append(a.failed, resp), append(a.errs, err)
	return nil, err
}

// foldedKey returns the first value of h's idempotency key under a name
// that is not canonical ("idempotency-key", set into the map as it is),
// as a server reads it; "" if none.
func foldedKey(h http.Header) string {
	for k, v := range h {
		if len(v) > 0 && sameName(k, idempotencykey.Header) {
			return v[0]
		}
	}
	return ""
}

// sameName reports whether the header name k is name in any case, as a
// server reads it: a key set into the map as it is ("idempotency-key")
// is sent as it is.
func sameName(k, name string) bool { return len(k) == len(name) && strings.EqualFold(k, name) }

// request returns the caller's request for attempt n of most (or its
// hedge), with ctx and a header of its own with the attempt's headers: the
// caller's request is not changed. The rest is shared, as nothing an attempt does
// changes it; the header's values are shared too, each capped at its
// length so that a header added to one attempt's request is not written
// into another's.
func (a *attempt) request(ctx context.Context, n, most int, hedge bool) *http.Request {
	h := make(http.Header, len(a.req.Header)+3)
	for k, v := range a.req.Header {
		// The caller's budget header, whatever its case, is not forwarded:
		// the attempt's own replaces it, if it has a deadline; nor its
		// attempt header, which the attempt's replaces; nor is its key
		// under a name of another case, which the one set below replaces
		// (the server would see two values, and refuse or ignore them).
		if sameName(k, deadline.Header) || sameName(k, retrysignal.AttemptHeader) || a.key[0] != "" && sameName(k, idempotencykey.Header) {
			continue
		}
		h[k] = v[:len(v):len(v)]
	}
	// The keys set here are canonical: set without Set's canonicalizing.
	if a.key[0] != "" {
		h[idempotencykey.Header] = a.key[:]
	}
	if _, ok := ctx.Deadline(); ok {
		deadline.Inject(ctx, h)
		ctx = budgetOnConn(ctx, h)
	}
	r := a.req.WithContext(ctx)
	v := retrysignal.Attempt{N: n, Max: most, Hedge: hedge}.String()
	if n == 1 && !hedge { // the first attempt's value is kept in a, allocated with it
		a.first[0] = v
		h[retrysignal.AttemptHeader] = a.first[:]
	} else {
		h[retrysignal.AttemptHeader] = []string{v}
	}
	r.Header = h
	return r
}

// budgetOnConn returns ctx with a trace that sets h's budget header
// ([deadline.Header]) again once the request has its connection, before
// net/http writes it: the time it waited for a free connection, dialed or
// shook hands is then taken off, so that the hop it goes to does not run
// out of time after its caller by that much. Only the first connection's:
// a request that net/http sends again on another may still be written on
// the first. A base that reports no connection (not net/http's), or one
// that clones the request before net/http sends it (oauth2's, a signing
// transport: h is then not the header sent), sends the budget as the
// request was made, the later end (review158). A trace of the caller's
// still hears of every event.
func budgetOnConn(ctx context.Context, h http.Header) context.Context {
	b := &budgetTrace{ctx: ctx, h: h}
	b.trace.GotConn = b.gotConn
	return httptrace.WithClientTrace(ctx, &b.trace)
}

// budgetTrace is the trace of budgetOnConn.
type budgetTrace struct {
	ctx   context.Context
	h     http.Header
	got   bool // the first connection's: on the request's goroutine only
	trace httptrace.ClientTrace
}

func (b *budgetTrace) gotConn(httptrace.GotConnInfo) {
	if !b.got {
		b.got = true
		deadline.Inject(b.ctx, b.h)
	}
}

// drain reads what is left of the body of an answer that is being retried,
// up to DrainLimit bytes, for DrainTimeout at most and while ctx lasts, so
// that its connection can be reused, and closes it: a body that trickles
// (a stuck proxy) costs its connection, not the next attempt's time.
func drain(ctx context.Context, body io.ReadCloser) {
	stop := context.AfterFunc(ctx, func() { body.Close() })
	defer stop()
	t := time.AfterFunc(DrainTimeout, func() { body.Close() })
	defer t.Stop()
	_, _ = io.CopyN(io.Discard, body, DrainLimit+1) // +1: to see the end of a body of DrainLimit bytes
	body.Close()
}

// classify marks the errors of an attempt that the dependency did not
// cause as [resilience.ClassRejected]: neither retried (the same request
// fails the same way) nor counted by a breaker. They are made by the
// client before or after the exchange: a request that net/http refuses to
// send (a URL without a host or with a scheme it does not speak, an invalid
// method or header, a body shorter than its ContentLength), a body of the
// caller's that fails to read, a server certificate that the client does
// not trust (TLS verification), a URL's port that does not parse, TLS
// versions the client's configuration leaves none of, a response header over the client's
// MaxResponseHeaderBytes over HTTP/1.1, an https URL for a server that speaks plain
// HTTP, an error of the base Transport's Proxy function (see proxyError).
// So is a request whose sending the server cut ([cutRequest]): one
// with a body (body is true) that is sent once (once is true), or one
// without a body of which net/http says some was written. Every other
// error, a connection refused or reset, a timeout, is left transient.
func classify(err error, body, once bool) error {
	switch {
	case localError(err):
		return resilience.Rejected(own(err))
	case cutRequest(err, body, once):
		return resilience.Rejected(err)
	}
	return err
}

// own marks err, an error made on this side, with the status that
// retrysignal.Status answers for it, 500 (grpcsignal's INTERNAL), where
// the pipeline's own refusals (class rejected too: the breaker, the
// throttle, the limit) are a 503: the request this service made was at
// fault (one that does not parse, a body that fails to read, a server
// certificate it does not trust: no retry fixes them). A context's error
// (a caller's body reader that gave up) is left as it is: Status reads
// the context's.
func own(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return ownFault{err}
}

// ownFault is an error made on this side (own).
type ownFault struct{ error }

func (e ownFault) Unwrap() error { return e.error }

// HTTPStatus returns 500.
func (ownFault) HTTPStatus() int { return http.StatusInternalServerError }

// cutRequest reports whether err is a write of the request that the
// server cut short with a reset or by closing the connection, and which
// is more likely the server refusing the request than failing. A server
// refusing a request over its limits (a body, headers or a URI too long)
// answers 413, 431, 414 or 400 and closes without reading the rest (nginx
// with lingering_close off, or once its lingering time is out): the reset
// drops the answer from the client's socket before net/http reads it, and
// net/http returns the write's error. A server that dies, or closes a
// kept-alive connection, in the middle of an upload gives the same error.
// So a request with a body counts as refused only if it is sent once (a
// body too long to keep for a retry, a method not retried: once is true):
// a retry would not tell the two apart, and a breaker that counted it
// would open on the caller's oversized uploads; a body that is retried is
// left transient, its retry gets the server's answer (a 413, permanent),
// or the retries' failures count. A request without a body counts as
// refused if net/http says that some of it was written ("connection
// broken"): headers too large for the server; a server that resets every
// connection as it accepts it cuts a request before its first byte, and
// that is the dependency failing.
func cutRequest(err error, body, once bool) bool {
	if !cutWrite(err) {
		return false
	}
	if body {
		return once
	}
	return strings.Contains(err.Error(), "net/http: HTTP/1.x transport connection broken: ")
}

// cutWrite reports whether err is a write of the request that the server
// cut short with a reset or by closing the connection (see cutRequest).
func cutWrite(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && (op.Op == "write" || op.Op == "readfrom") &&
		(errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed))
}

// resetRead reports whether err is a read of the answer that the server
// cut with a reset: it left what it was sent unread. (One that read the
// whole request and hung up with no answer is failing.)
func resetRead(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "read" && errors.Is(err, syscall.ECONNRESET)
}

// netHTTPLocal are parts of the messages of the errors that net/http
// makes on the client's side without the server's doing; net/http gives
// no type for them.
var netHTTPLocal = []string{
	"http: nil Request.URL",
	"http: nil Request.Header",
	"net/http: invalid method",
	"net/http: invalid header ",
	"net/http: invalid trailer ",
	"net/http: server response headers exceeded",
	"http: ContentLength=",
	// HTTP/2's: a request header list over the server's advertised
	// limit, or a header HTTP/2 forbids (never sent). Not a response
	// header over MaxResponseHeaderBytes: HTTP/2 ends the connection with
	// COMPRESSION_ERROR, which fails the other requests on it too, and
	// which a server's broken header compression also gives.
	"http2: request header list larger than peer's advertised limit",
	"http2: invalid Connection request header",
	"http2: invalid Upgrade request header",
	"http2: invalid Transfer-Encoding request header",
	// crypto/tls's, of the client's own configuration, before any
	// record is sent.
	"tls: no supported versions satisfy MinVersion and MaxVersion",
}

// addrLocal are the messages of the net.AddrErrors of an address that
// does not parse, which package net makes before it dials; not "no
// suitable address found", of a host whose addresses the network cannot
// reach.
var addrLocal = map[string]bool{"invalid port": true, "missing port in address": true,
	"too many colons in address": true, "missing ']' in address": true, "unexpected '[' in address": true,
	"unexpected ']' in address": true}

// plusOne is n+1 without overflowing: a limit one past n, to tell a
// length of n from a longer one.
func plusOne(n int64) int64 { return n + min(1, math.MaxInt64-n) }

// localError reports whether err, an attempt's error from the base
// RoundTripper, was made by the client without the dependency's doing.
func localError(err error) bool {
	var (
		verify           *tls.CertificateVerificationError
		unknownAuthority x509.UnknownAuthorityError
		hostname         x509.HostnameError
		invalid          x509.CertificateInvalidError
		body             *bodyError
		record           tls.RecordHeaderError
	)
	switch {
	case errors.As(err, &body), errors.As(err, &verify), errors.As(err, &unknownAuthority),
		errors.As(err, &hostname), errors.As(err, &invalid), errors.Is(err, http.ErrSchemeMismatch):
		return true
	case errors.As(err, &record) && string(record.RecordHeader[:]) == "HTTP/":
		return true // an https URL for a server that speaks plain HTTP, as http.Client says
	case unsendable(err):
		return true // the URL's scheme, host or address: nothing was dialed
	}
	msg := err.Error()
	for _, m := range netHTTPLocal {
		if strings.Contains(msg, m) {
			return true
		}
	}
	return false
}

// unsendable reports whether err says that a request's URL names a
// scheme, no host or an address (one that does not parse: nothing was
// dialed) that the base cannot send to; net/http gives its two no type.
func unsendable(err error) bool {
	var addr *net.AddrError
	if errors.As(err, &addr) && addrLocal[addr.Err] {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "unsupported protocol scheme") || strings.Contains(msg, "http: no Host in request URL")
}

// proxyError reports whether err, the error of base's RoundTrip of r, is
// that of base's Proxy function, for a base that is net/http's Transport:
// its configuration (an HTTP_PROXY that does not parse, say), which it
// returns as it is before anything is dialed; no retry fixes it, and the
// dependency never saw the request (review113: it was retried, and opened
// the breaker on a healthy dependency). Proxy is asked again, with r, for
// an error that is no network error nor a context's (review114: a Proxy
// that returns its request's context's error made a timeout the
// caller's), and its error must be the same: a Proxy that fails only now
// and then is recognised only when it fails again, else its failure
// counts, as it did before.
func proxyError(base http.RoundTripper, r *http.Request, err error) bool {
	t, ok := base.(*http.Transport)
	var op *net.OpError
	var netErr net.Error
	if !ok || t.Proxy == nil || errors.As(err, &op) || errors.As(err, &netErr) && netErr.Timeout() ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	_, perr := t.Proxy(r)
	return perr != nil && (perr == err || perr.Error() == err.Error())
}

// callerBody is a request body of the caller's: its read errors are the
// caller's, which net/http returns as they are, and so is its ending
// before its ContentLength (want, 0 if unknown), and an attempt whose
// time ran out while it waited, most of that time, for the body to give
// bytes (slow). A body whose Read is under way as the attempt's context
// ends is closed (stalled), as net/http would wait for it for good, unless
// a retry may send it (a stream kept for one, at an attempt timeout).
type callerBody struct {
	io.ReadCloser
	want, got int64
	short     atomic.Bool // read by the attempt once net/http's writer is done with it
	start     time.Time   // the attempt's
	stop      func()      // closes the caller's body; nil: Close does

	mu      sync.Mutex    // the reads are net/http's writer's; stalled and slow are the attempt's
	reading time.Duration // since start, as a Read began; -1 if none is under way
	waited  time.Duration // in Reads that ended
	ended   bool          // read to its end: what follows is the server's time
	closed  sync.Once     // the caller's body, by stalled or by net/http: once
}

// Close closes the caller's body, once: stalled may have closed it already.
func (b *callerBody) Close() error {
	var err error
	b.closed.Do(func() { err = b.ReadCloser.Close() })
	return err
}

func (b *callerBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	began := time.Since(b.start)
	b.reading = began
	b.mu.Unlock()
	n, err := b.ReadCloser.Read(p)
	b.mu.Lock()
	b.waited += time.Since(b.start) - began
	b.reading = -1
	b.ended = b.ended || err == io.EOF
	b.mu.Unlock()
	b.got += int64(n)
	if err == io.EOF && b.got < b.want {
		b.short.Store(true)
	}
	if err != nil && err != io.EOF {
		err = &bodyError{err: err}
	}
	return n, err
}

// stalled closes the caller's body if a Read of it is under way.
func (b *callerBody) stalled() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.reading < 0 {
		return
	}
	if b.stop != nil {
		b.stop()
	} else {
		_ = b.Close()
	}
}

// slow reports whether the attempt spent at least half of its time so far
// waiting for the caller's body to give bytes, and did not read it to its
// end: a server that has the whole request and does not answer is at
// fault, however long the body took (review170).
func (b *callerBody) slow() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ended {
		return false
	}
	now := time.Since(b.start)
	waited := b.waited
	if b.reading >= 0 {
		waited += now - b.reading
	}
	return 2*waited >= now
}

// bodyError is the error of a caller's request body that failed to read.
type bodyError struct{ err error }

func (e *bodyError) Error() string                     { return "httpclient: read request body: " + e.err.Error() }
func (e *bodyError) Unwrap() error                     { return e.err }
func (e *bodyError) ResilienceClass() resilience.Class { return resilience.ClassRejected }

// class returns the class of an answer's status; one outside 100 to 599,
// which a server should not send, is a success below 400, permanent below
// 500 and terminal from 500.
func (c *config) class(status int) resilience.Class {
	switch {
	case status >= 100 && status < len(c.classes):
		return c.classes[status]
	case status < 400:
		return resilience.ClassSuccess
	case status < 500:
		return resilience.ClassPermanent
	}
	return resilience.ClassTerminal
}

// bareURL returns u without its user, query and fragment, for a
// message: they may hold secrets.
func bareURL(u *url.URL) string {
	b := *u
	b.User, b.RawQuery, b.Fragment = nil, "", ""
	return b.String()
}

// statusError returns the error for a failed answer, without reading its
// body.
func (c *config) statusError(req *http.Request, resp *http.Response, hedge bool) error {
	class := c.class(resp.StatusCode)
	se := &StatusError{
		StatusCode: resp.StatusCode,
		Status:     resp.Status,
		Method:     req.Method,
		URL:        bareURL(req.URL),
		Header:     resp.Header,
		class:      class,
		response:   resp,
	}
	switch {
	case class.Failure() && retrysignal.NoRetry(resp.Header) && c.trustNoRetry(req.URL):
		se.class = resilience.ClassTerminal // retried below already: not here, Retry-After or not
	case class.Retryable():
		if d, ok := ParseRetryAfter(resp.Header.Get("Retry-After"), time.Now()); ok {
			return resilience.RetryAfter(se, d)
		}
	case class == resilience.ClassPermanent && resp.StatusCode == http.StatusConflict && req.Header.Get(idempotencykey.Header) != "":
		// The key's first request still runs (package idempotency says
		// so with a Retry-After): its answer comes after it, and this is
		// no failure of the dependency's. A hedge's 409 is its own twin's
		// doing, Retry-After or not: never the answer that ends the call.
		if d, ok := ParseRetryAfter(resp.Header.Get("Retry-After"), time.Now()); ok {
			se.class = resilience.ClassPending
			return resilience.RetryAfter(se, d)
		}
		if hedge {
			se.class = resilience.ClassPending
		}
	case class == resilience.ClassSuccess:
		se.class = resilience.ClassPermanent // failed by the Client (outside 2xx), not by the Transport
	}
	return se
}

// releaseBody releases a response's contexts when its body is closed. A
// failed answer's also carries the pipeline's error, for the Client.
type releaseBody struct {
	io.ReadCloser
	release func()
	err     error
}

func (b *releaseBody) Close() error {
	err := b.ReadCloser.Close()
	b.release()
	return err
}

// releaseRWBody is a releaseBody that keeps the io.Writer of the body of a
// 101 Switching Protocols answer (the upgraded connection).
type releaseRWBody struct {
	*releaseBody
	io.Writer
}

// releaseRWCBody is a releaseRWBody that keeps its CloseWrite too: net/http's
// upgraded connection half-closes, which a reverse proxy uses to pass on
// its client's (review113: without it, a backend that answers once its
// client has half-closed, as an exec stream does, lost its answer).
type releaseRWCBody struct {
	releaseRWBody
	closeWriter
}

type closeWriter interface{ CloseWrite() error }

// releaseBody wraps body, the body of the answer returned, to release
// when closed, keeping its Write if it has one; the wrapper is a's own, so
// that it costs no allocation of its own.
func (a *attempt) releaseBody(body io.ReadCloser, release func(), err error) io.ReadCloser {
	a.body = releaseBody{ReadCloser: body, release: release, err: err}
	rb := &a.body
	if w, ok := body.(io.Writer); ok {
		if cw, ok := body.(closeWriter); ok {
			return releaseRWCBody{releaseRWBody{rb, w}, cw}
		}
		return releaseRWBody{rb, w}
	}
	return rb
}

// ParseRetryAfter reads a Retry-After header value (RFC 9110 section
// 10.2.3): delay-seconds, or an HTTP date taken relative to now. A date in
// the past is a delay of 0; one too far off to fit a time.Duration (as
// delay-seconds of 10 digits or more) is the longest. It reports false
// for an empty or malformed value.
func ParseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if v[0] >= '0' && v[0] <= '9' {
		v = strings.TrimLeft(v, "0") // delay-seconds is 1*DIGIT: leading zeros too
		if v == "" {
			v = "0"
		}
		if len(v) > 9 { // over 31 years: as long as can be, as a date that far off is (review127)
			if strings.Trim(v, "0123456789") != "" {
				return 0, false
			}
			return math.MaxInt64, true
		}
		secs, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			return 0, false
		}
		return time.Duration(secs) * time.Second, true
	}
	at, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return max(at.Sub(now), 0), true
}
