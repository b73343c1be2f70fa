package httpclient

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/resiliencekit/resiliencekit/idempotencykey"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrysignal"
)

// Client is a small JSON client: an *http.Client on a [Transport], so
// that it follows redirects and keeps cookies ([WithJar],
// [CheckRedirect]). A status outside 2xx is returned as an error that
// [errors.As] finds a [*StatusError] in, with an excerpt of the body
// (none for a redirect not followed, whose body net/http has read). A
// 2xx whose body, read whole, is not JSON or not of the type decoded into
// is an error of class terminal (not retried; 502 for
// retrysignal.Status, with the signal), as grpcclient's failed unmarshal
// is, and so is a gzip body that is corrupt; a body whose read fails is
// left as the read's error, a gzip body that ends short among them (a
// cut by the network reads the same). It is safe for concurrent use. The
// zero Client works as New().
type Client struct {
	hc  *http.Client
	cfg *config
}

// New returns a Client whose transport opts configure.
func New(opts ...Option) *Client {
	t := NewTransport(opts...)
	return &Client{
		hc:  &http.Client{Transport: t, Jar: t.cfg.jar, CheckRedirect: t.cfg.redirect},
		cfg: t.cfg,
	}
}

var defaultClient = New()

func (c *Client) client() *Client {
	if c.hc == nil {
		return defaultClient
	}
	return c
}

// CallOption configures one call of a [Client].
type CallOption interface {
	applyCall(*http.Request)
}

type callOptionFunc func(*http.Request)

func (f callOptionFunc) applyCall(r *http.Request) { f(r) }

// IdempotencyKey sends key as the Idempotency-Key header on every attempt
// of the call, which lets a POST or PATCH be retried. A request that
// follows a redirect gets a key drawn from key and its URL (the
// Transport's), the same on every retry: a server binds a key to one
// request, and would refuse the redirected one as the key reused.
func IdempotencyKey(key string) CallOption {
	return callOptionFunc(func(r *http.Request) { r.Header.Set(idempotencykey.Header, key) })
}

// Header sets a request header on the call.
func Header(key, value string) CallOption {
	return callOptionFunc(func(r *http.Request) { r.Header.Set(key, value) })
}

// GetJSON gets url and decodes its JSON response into out.
func (c *Client) GetJSON(ctx context.Context, url string, out any, opts ...CallOption) error {
	return c.call(ctx, http.MethodGet, url, nil, out, opts)
}

// PostJSON posts in as JSON to url and decodes the response into out (nil:
// discard it). It is retried only with an idempotency key.
func (c *Client) PostJSON(ctx context.Context, url string, in, out any, opts ...CallOption) error {
	return c.call(ctx, http.MethodPost, url, in, out, opts)
}

// PutJSON puts in as JSON to url and decodes the response into out (nil:
// discard it).
func (c *Client) PutJSON(ctx context.Context, url string, in, out any, opts ...CallOption) error {
	return c.call(ctx, http.MethodPut, url, in, out, opts)
}

// DeleteJSON deletes url and decodes the response into out (nil: discard
// it).
func (c *Client) DeleteJSON(ctx context.Context, url string, out any, opts ...CallOption) error {
	return c.call(ctx, http.MethodDelete, url, nil, out, opts)
}

func (c *Client) call(ctx context.Context, method, url string, in, out any, opts []CallOption) error {
	c = c.client()
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return resilience.Rejected(own(fmt.Errorf("httpclient: encode request: %w", err))) // the caller's, not the dependency's
		}
		body = bytes.NewReader(b) // http.NewRequest makes it rewindable
	}
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return resilience.Rejected(own(fmt.Errorf("httpclient: %w", err))) // a URL that does not parse: nothing sent
	}
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for _, o := range opts {
		if o != nil {
			o.applyCall(req)
		}
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return doError(c.cfg, req, resp, unwrapURLError(err))
	}
	defer drain(ctx, resp.Body) // lets the connection be reused, for DrainTimeout at most
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return c.cfg.failed(req, resp)
	}
	if out != nil && resp.StatusCode != http.StatusNoContent {
		body := &readEnd{r: resp.Body}
		if err := json.NewDecoder(body).Decode(out); err != nil {
			err = fmt.Errorf("httpclient: decode %s %s response: %w", method, bareURL(resp.Request.URL), err)
			var caller *json.InvalidUnmarshalError
			switch {
			case errors.As(err, &caller): // out is no pointer: the caller's
				return resilience.Rejected(own(err))
			case !body.failed: // the dependency's answer, whole: a retry meets it again, as grpcclient's failed unmarshal
				return resilience.Terminal(err)
			}
			return err // a read that failed: as the network left it
		}
	}
	return nil
}

// doError is the error of a Client's call that net/http's Client.Do
// failed with err, unwrapped, and resp. A redirect the dependency asked
// for and that was not followed is a 3xx that no retry changes
// (review158: it was transient, and a redirect loop below a hop was
// retried at every layer): one that CheckRedirect refused (or the 11th),
// of which net/http returns both the answer, its body closed, and the
// policy's error, is that error with a [*StatusError] of the answer (class
// permanent, 502 for retrysignal.Status); a policy that gave the caller's
// context's error is the caller's end (review161). A Location that does
// not parse, or that the Transport cannot send to ([badRedirect]), is the
// dependency's answer: terminal, 502.
func doError(cfg *config, req *http.Request, resp *http.Response, err error) error {
	switch {
	case resp != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)):
		return err
	case resp != nil:
		return fmt.Errorf("httpclient: redirect not followed: %w (%w)", err, cfg.failed(req, resp))
	case strings.HasPrefix(err.Error(), "failed to parse Location header"): // net/http's words, of no type, with the Location
		return badRedirect{errors.New("httpclient: the redirect's Location does not parse")} // which may hold secrets (review162)
	}
	return err
}

// badRedirect is the error of a redirect that cannot be followed because
// of the dependency's Location: it does not parse, or names a scheme or
// an address that the Transport cannot send to. No retry changes it, and
// it is no fault of the caller's: of class terminal, 502 for
// retrysignal.Status (review161: transient, or the caller's own, 500).
type badRedirect struct{ error }

func (e badRedirect) Unwrap() error { return e.error }

// HTTPStatus returns 502.
func (badRedirect) HTTPStatus() int { return http.StatusBadGateway }

// ResilienceClass returns [resilience.ClassTerminal].
func (badRedirect) ResilienceClass() resilience.Class { return resilience.ClassTerminal }

// readEnd reads r, noting whether a read failed otherwise than at its
// end: a body that then fails to decode was read whole, and is not JSON
// or not of the type (review158, review161: an empty body's EOF, too).
type readEnd struct {
	r      io.Reader
	failed bool
}

func (b *readEnd) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err != nil && err != io.EOF && !corrupt(err) {
		b.failed = true
	}
	return n, err
}

// corrupt reports whether err says that a body net/http decompresses
// (gzip, which it asked for) is not what its encoding says: the bytes
// came, and a retry gets them again (review162).
func corrupt(err error) bool {
	var flateErr flate.CorruptInputError
	return errors.Is(err, gzip.ErrHeader) || errors.Is(err, gzip.ErrChecksum) || errors.As(err, &flateErr)
}

// unwrapURLError returns the error that *http.Client wrapped in a
// *url.Error, whose message would repeat the URL with its query.
func unwrapURLError(err error) error {
	if ue := (*url.Error)(nil); errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// failed returns the error for a final answer outside 2xx: the pipeline's
// error if the transport made one (it tells why the retries stopped), with
// the start of the body read into its StatusError.
func (c *config) failed(req *http.Request, resp *http.Response) error {
	if resp.Request != nil { // the last attempt's, as the Transport sent it; a Base may leave it out
		req = resp.Request
	}
	sent, _ := retrysignal.ParseAttempt(req.Header.Get(retrysignal.AttemptHeader)) // a hedge's, as the Transport marked it
	err := c.statusError(req, resp, sent.Hedge)
	if rb, ok := resp.Body.(*releaseBody); ok && rb.err != nil {
		err = rb.err
	}
	var se *StatusError
	if errors.As(err, &se) {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, plusOne(int64(c.maxErrorBody))))
		se.Truncated = len(b) > c.maxErrorBody
		se.Body = b[:min(len(b), c.maxErrorBody)]
	}
	return err
}
