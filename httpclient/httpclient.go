// Package httpclient makes outbound HTTP calls resilient: a
// [http.RoundTripper] that runs every request through a time budget, a
// circuit breaker and a jittered retry, so any *http.Client or SDK can use
// it, and a small JSON [Client] on top.
//
// Connection errors, resets, timeouts and the statuses 429, 502, 503 and 504
// are transient: retried, with a Retry-After header honoured up to the
// retry's MaxDelay and the budget. Other 4xx statuses are the caller's fault
// and 500, 501 and other 5xx are failures that a retry will not fix: neither
// is retried. Only idempotent methods (GET, HEAD, OPTIONS, PUT, DELETE) are
// retried, and POST or PATCH only when they carry an Idempotency-Key
// header, sent unchanged on every attempt; [AutoIdempotencyKey] adds one.
//
// Each attempt sends the time left in its budget in the header of package
// deadline, so the next service can stop when nobody waits any more. The
// request body is rewound for each attempt, the body of a failed response is
// drained (within a bound) and closed before the next one so the connection
// is reused, and the caller's request is never modified.
package httpclient

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/resiliencekit/resiliencekit/deadline"
	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// drainLimit bounds how much of a failed response's body is read past the
// excerpt to let the connection be reused; a longer body is closed unread.
const drainLimit = 256 << 10

// StatusError is an HTTP answer that the retry stage treated as an error:
// a transient status, or any other status of 400 and above. It carries a
// bounded excerpt of the body.
type StatusError struct {
	// StatusCode is the response's status code, such as 503.
	StatusCode int
	// Status is the response's status line, such as "503 Service Unavailable".
	Status string
	// Method and URL identify the request; the URL has no query or password.
	Method, URL string
	// Header is the response's header.
	Header http.Header
	// Body is the start of the response's body, at most [MaxErrorBody] bytes.
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

// ResilienceClass returns the status's class: transient for the
// transport's transient statuses, permanent for other 4xx, terminal for
// other 5xx.
func (e *StatusError) ResilienceClass() resilience.Class { return e.class }

// Option configures a [Transport] or a [Client].
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	base         http.RoundTripper
	pipeline     *pipeline.Pipeline
	retryMethods map[string]bool
	transient    map[int]bool
	autoKey      bool
	maxErrorBody int
}

// Base sets the RoundTripper that makes each attempt. Default
// [http.DefaultTransport].
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
func WithPipeline(p *pipeline.Pipeline) Option {
	return optionFunc(func(c *config) {
		if p != nil {
			c.pipeline = p
		}
	})
}

// RetryMethods sets the methods retried without an idempotency key.
// Default GET, HEAD, OPTIONS, PUT, DELETE.
func RetryMethods(methods ...string) Option {
	return optionFunc(func(c *config) {
		c.retryMethods = make(map[string]bool, len(methods))
		for _, m := range methods {
			c.retryMethods[m] = true
		}
	})
}

// TransientStatus sets the statuses that are retried. Default 429, 502,
// 503, 504.
func TransientStatus(codes ...int) Option {
	return optionFunc(func(c *config) {
		c.transient = make(map[int]bool, len(codes))
		for _, code := range codes {
			c.transient[code] = true
		}
	})
}

// AutoIdempotencyKey gives every POST or PATCH without an Idempotency-Key
// header a fresh random (version 4 UUID) key, the same on all its attempts,
// so that it can be retried. Use it only against servers that honour the
// header. Default off.
func AutoIdempotencyKey() Option {
	return optionFunc(func(c *config) { c.autoKey = true })
}

// MaxErrorBody sets how many bytes of a failed response's body a
// [StatusError] keeps. Default 64 KiB.
func MaxErrorBody(n int) Option {
	return optionFunc(func(c *config) {
		if n > 0 {
			c.maxErrorBody = n
		}
	})
}

func newConfig(opts []Option) config {
	c := config{
		base:         http.DefaultTransport,
		pipeline:     defaultPipeline,
		maxErrorBody: 64 << 10,
	}
	RetryMethods(http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodPut, http.MethodDelete).apply(&c)
	TransientStatus(http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout).apply(&c)
	for _, o := range opts {
		o.apply(&c)
	}
	return c
}

var defaultPipeline = pipeline.New(pipeline.WithRetry(retrypolicy.New()))

// Transport is an [http.RoundTripper] that runs each request through a
// pipeline: a time budget, a breaker and a retry. It is safe for concurrent
// use.
type Transport struct {
	cfg config
}

// NewTransport returns a Transport configured by opts.
func NewTransport(opts ...Option) *Transport {
	return &Transport{cfg: newConfig(opts)}
}

// RoundTrip sends req through the stages. When the last attempt got an
// HTTP answer, that answer is returned as a response, as from any
// RoundTripper, with its body cut to [MaxErrorBody] bytes if it was a
// failure; otherwise the error says why (errors.Is works with
// [breaker.ErrOpen], [retrypolicy.ErrMaxAttempts], context errors).
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.do(req)
	if se := (*StatusError)(nil); errors.As(err, &se) && se.response != nil {
		return se.response, nil
	}
	return resp, err
}

// do is RoundTrip that returns failed statuses as errors.
func (t *Transport) do(req *http.Request) (*http.Response, error) {
	key := req.Header.Get(idempotency.Header)
	if key == "" && t.cfg.autoKey && (req.Method == http.MethodPost || req.Method == http.MethodPatch) {
		key = uuid.NewString()
	}
	hasBody := req.Body != nil && req.Body != http.NoBody
	var once []pipeline.CallOption
	if (!t.cfg.retryMethods[req.Method] && key == "") || (hasBody && req.GetBody == nil) {
		once = []pipeline.CallOption{pipeline.SingleAttempt()}
	}
	a := attempt{t: t, req: req, key: key}
	resp, release, err := pipeline.DoStream(req.Context(), t.cfg.pipeline, a.run, once...)
	if err != nil {
		if a.n == 0 && hasBody {
			req.Body.Close() // a RoundTripper always closes the body
		}
		return nil, err
	}
	resp.Body = &releaseBody{ReadCloser: resp.Body, release: release}
	return resp, nil
}

// attempt makes the attempts of one request.
type attempt struct {
	t   *Transport
	req *http.Request
	key string
	n   int
}

func (a *attempt) run(ctx context.Context) (*http.Response, error) {
	r := a.req.Clone(ctx)
	if a.key != "" {
		r.Header.Set(idempotency.Header, a.key)
	}
	if a.n > 0 && a.req.Body != nil && a.req.Body != http.NoBody {
		body, err := a.req.GetBody()
		if err != nil {
			return nil, resilience.Permanent(fmt.Errorf("httpclient: rewind request body: %w", err))
		}
		r.Body = body
	}
	a.n++
	deadline.Inject(ctx, r.Header)
	resp, err := a.t.cfg.base.RoundTrip(r)
	if err != nil {
		return nil, classify(err)
	}
	if resp.StatusCode >= 400 || a.t.cfg.transient[resp.StatusCode] {
		return nil, a.t.statusError(r, resp)
	}
	return resp, nil
}

// classify marks transport errors that a retry will not fix.
func classify(err error) error {
	var unknownAuthority x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var invalid x509.CertificateInvalidError
	if errors.As(err, &unknownAuthority) || errors.As(err, &hostname) || errors.As(err, &invalid) {
		return resilience.Terminal(err)
	}
	return err
}

// statusError reads a bounded excerpt of a failed response, drains and
// closes its body, and returns the error for it.
func (t *Transport) statusError(req *http.Request, resp *http.Response) error {
	body, err := io.ReadAll(io.LimitReader(resp.Body, int64(t.cfg.maxErrorBody)+1))
	truncated := len(body) > t.cfg.maxErrorBody
	if truncated {
		body = body[:t.cfg.maxErrorBody]
	} else if err == nil {
		_, _ = io.CopyN(io.Discard, resp.Body, drainLimit)
	}
	resp.Body.Close()

	u := *req.URL
	u.User, u.RawQuery, u.Fragment = nil, "", ""
	se := &StatusError{
		StatusCode: resp.StatusCode,
		Status:     resp.Status,
		Method:     req.Method,
		URL:        u.String(),
		Header:     resp.Header,
		Body:       body,
		Truncated:  truncated,
		class:      resilience.ClassPermanent,
		response:   resp,
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	switch {
	case t.cfg.transient[resp.StatusCode]:
		se.class = resilience.ClassTransient
		if d, ok := ParseRetryAfter(resp.Header.Get("Retry-After"), time.Now()); ok {
			return resilience.RetryAfter(se, d)
		}
	case resp.StatusCode >= 500:
		se.class = resilience.ClassTerminal
	}
	return se
}

// releaseBody releases a response's contexts when its body is closed.
type releaseBody struct {
	io.ReadCloser
	release func()
}

func (b *releaseBody) Close() error {
	err := b.ReadCloser.Close()
	b.release()
	return err
}

// ParseRetryAfter reads a Retry-After header value (RFC 9110 section
// 10.2.3): delay-seconds, or an HTTP date taken relative to now. A date in
// the past is a delay of 0. It reports false for an empty or malformed
// value.
func ParseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if v[0] >= '0' && v[0] <= '9' {
		if len(v) > 9 { // over 31 years: not a real hint
			return 0, false
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
