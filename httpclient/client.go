package httpclient

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// Client is a small JSON client over a [Transport]. A status outside 2xx
// is returned as an error that [errors.As] finds a [*StatusError] in. It is
// safe for concurrent use.
type Client struct {
	t *Transport
}

// New returns a Client whose transport opts configure.
func New(opts ...Option) *Client {
	return &Client{t: NewTransport(opts...)}
}

// CallOption configures one call of a [Client].
type CallOption func(*http.Request)

// IdempotencyKey sends key as the Idempotency-Key header on every attempt
// of the call, which lets a POST or PATCH be retried.
func IdempotencyKey(key string) CallOption {
	return func(r *http.Request) { r.Header.Set(idempotency.Header, key) }
}

// Header sets a request header on the call.
func Header(key, value string) CallOption {
	return func(r *http.Request) { r.Header.Set(key, value) }
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
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("httpclient: encode request: %w", err)
		}
		body = bytes.NewReader(b) // http.NewRequest makes it rewindable
	}
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return resilience.Permanent(fmt.Errorf("httpclient: %w", err))
	}
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for _, o := range opts {
		o(req)
	}
	resp, err := c.t.do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return c.t.statusError(req, resp)
	}
	if out != nil && resp.StatusCode != http.StatusNoContent {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			return fmt.Errorf("httpclient: decode %s %s response: %w", method, req.URL.Redacted(), err)
		}
	}
	_, _ = io.CopyN(io.Discard, resp.Body, drainLimit) // lets the connection be reused
	return nil
}
