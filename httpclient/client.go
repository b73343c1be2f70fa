package httpclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/resiliencekit/resiliencekit/idempotencykey"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrysignal"
)

// Client is a small JSON client: an *http.Client on a [Transport], so
// that it follows redirects and keeps cookies ([WithJar],
// [CheckRedirect]). A status outside 2xx is returned as an error that
// [errors.As] finds a [*StatusError] in, with an excerpt of the body. A
// 2xx whose body, read whole, is not JSON or not of the type decoded into
// is an error of class terminal (not retried; 502 for
// retrysignal.Status, with the signal), as grpcclient's failed unmarshal
// is; a body whose read fails is left as the read's error. It is safe for
// concurrent use. The zero Client works as New().
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
	if err != nil && resp != nil {
		// A redirect that CheckRedirect refused (or the 10th), its
		// answer's body closed: net/http returns both. The answer was
		// a 3xx not followed, as one handed back (of class permanent,
		// 502 for retrysignal.Status), and no retry changes it
		// (review158: it was transient, and a redirect loop below a
		// hop was retried at every layer).
		return fmt.Errorf("httpclient: redirect not followed: %w (%w)", unwrapURLError(err), c.cfg.failed(req, resp))
	}
	if err != nil {
		return unwrapURLError(err)
	}
	defer drain(ctx, resp.Body) // lets the connection be reused, for DrainTimeout at most
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return c.cfg.failed(req, resp)
	}
	if out != nil && resp.StatusCode != http.StatusNoContent {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			err = fmt.Errorf("httpclient: decode %s %s response: %w", method, resp.Request.URL.Redacted(), err)
			if malformed(err) { // the dependency's answer, whole: a retry meets it again, as grpcclient's failed unmarshal
				return resilience.Terminal(err)
			}
			return err // a read that failed: as the network left it
		}
	}
	return nil
}

// malformed reports whether err says that a JSON document read whole is
// not one, or not of the type decoded into (review158: such a 200 was
// transient, retried at every layer of a chain).
func malformed(err error) bool {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	return errors.As(err, &syntax) || errors.As(err, &typ)
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
