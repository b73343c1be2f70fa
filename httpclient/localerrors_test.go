package httpclient_test

import (
	"context"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// attemptCounter counts the attempts the pipeline made: the requests
// handed to the base RoundTripper.
type attemptCounter struct {
	base http.RoundTripper
	n    atomic.Int64
	mu   sync.Mutex
	errs []error // each attempt's, for the log
}

func (c *attemptCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	resp, err := c.base.RoundTrip(r)
	c.mu.Lock()
	c.errs = append(c.errs, err)
	c.mu.Unlock()
	return resp, err
}

// failingReader returns one byte, then fails: a caller's body that breaks
// while it is sent.
type failingReader struct{ read bool }

func (f *failingReader) Read(p []byte) (int, error) {
	if !f.read {
		f.read = true
		p[0] = '{'
		return 1, nil
	}
	return 0, errors.New("disk on fire")
}

// TestLocalErrorsAreNeitherRetriedNorCounted: an error that the client
// made, before or after the exchange, is tried once, is of class
// rejected (the caller's cancellation: canceled), and leaves the
// breaker's counts as they were: no failure, no success. The dependency
// sees none of these requests but the cancelled one.
func TestLocalErrorsAreNeitherRetriedNorCounted(t *testing.T) {
	var served atomic.Int64
	plain := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPut { // a broken body may reach the handler, late
			served.Add(1)
		}
		if r.URL.Path == "/slow" {
			<-r.Context().Done()
			return
		}
		if r.URL.Path == "/big-header" {
			w.Header().Set("X-Big", strings.Repeat("x", 8<<10))
		}
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	tlsSrv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served.Add(1) }))
	tlsSrv.Config.ErrorLog = log.New(io.Discard, "", 0) // the handshakes it refuses
	tlsSrv.StartTLS()
	t.Cleanup(tlsSrv.Close)
	httpsURL := "https://" + strings.TrimPrefix(plain.URL, "http://")

	type row struct {
		name string
		// do makes the call through c, whose base transport is base.
		do           func(ctx context.Context, c *httpclient.Client, rt http.RoundTripper) error
		base         func() *http.Transport
		wantAttempts int64
		wantClass    resilience.Class
		wantServed   int64
	}
	get := func(url string) func(ctx context.Context, c *httpclient.Client, rt http.RoundTripper) error {
		return func(ctx context.Context, c *httpclient.Client, _ http.RoundTripper) error {
			return c.GetJSON(ctx, url, nil)
		}
	}
	send := func(mk func(ctx context.Context) *http.Request) func(ctx context.Context, c *httpclient.Client, rt http.RoundTripper) error {
		return func(ctx context.Context, _ *httpclient.Client, rt http.RoundTripper) error {
			resp, err := rt.RoundTrip(mk(ctx))
			if resp != nil {
				resp.Body.Close()
			}
			return err
		}
	}
	defaultBase := func() *http.Transport { return http.DefaultTransport.(*http.Transport).Clone() }
	rows := []row{
		{name: "URL without a scheme (unsupported protocol scheme)", do: get("localhost:8080/orders"), wantAttempts: 1, wantClass: resilience.ClassRejected},
		{name: "URL without a host", do: get("http:///orders"), wantAttempts: 1, wantClass: resilience.ClassRejected},
		{name: "URL that does not parse", do: get("http://[::1"), wantAttempts: 0, wantClass: resilience.ClassRejected},
		{name: "invalid header value", do: send(func(ctx context.Context) *http.Request {
			r, _ := http.NewRequestWithContext(ctx, http.MethodGet, plain.URL, nil)
			r.Header.Set("X-Bad", "a\nb")
			return r
		}), wantAttempts: 1, wantClass: resilience.ClassRejected},
		{name: "body shorter than its ContentLength", do: send(func(ctx context.Context) *http.Request {
			r, _ := http.NewRequestWithContext(ctx, http.MethodPut, plain.URL, strings.NewReader("abc"))
			r.ContentLength = 10
			return r
		}), wantAttempts: 1, wantClass: resilience.ClassRejected},
		{name: "caller's body fails to read while sent", do: send(func(ctx context.Context) *http.Request {
			r, _ := http.NewRequestWithContext(ctx, http.MethodPut, plain.URL, &failingReader{})
			return r
		}), wantAttempts: 1, wantClass: resilience.ClassRejected},
		{name: "request body that cannot be encoded", do: func(ctx context.Context, c *httpclient.Client, _ http.RoundTripper) error {
			return c.PostJSON(ctx, plain.URL, make(chan int), nil)
		}, wantAttempts: 0, wantClass: resilience.ClassRejected},
		{name: "TLS: certificate not trusted", do: get(tlsSrv.URL), wantAttempts: 1, wantClass: resilience.ClassRejected},
		{name: "https URL for a plain HTTP server", do: get(httpsURL), wantAttempts: 1, wantClass: resilience.ClassRejected},
		{name: "response header over the client's limit", do: get(plain.URL + "/big-header"), base: func() *http.Transport {
			tr := defaultBase()
			tr.MaxResponseHeaderBytes = 1 << 10
			return tr
		}, wantAttempts: 1, wantClass: resilience.ClassRejected, wantServed: 1},
		{name: "caller cancels during the attempt", do: func(ctx context.Context, c *httpclient.Client, _ http.RoundTripper) error {
			ctx, cancel := context.WithCancel(ctx)
			time.AfterFunc(50*time.Millisecond, cancel)
			return c.GetJSON(ctx, plain.URL+"/slow", nil)
		}, wantAttempts: 1, wantClass: resilience.ClassCanceled, wantServed: 1},
	}
	for _, tc := range rows {
		t.Run(tc.name, func(t *testing.T) {
			base := defaultBase
			if tc.base != nil {
				base = tc.base
			}
			tr := base()
			defer tr.CloseIdleConnections()
			rt := &attemptCounter{base: tr}
			b := breaker.New("dep", breaker.ConsecutiveFailures(1))
			opts := []httpclient.Option{httpclient.Base(rt), httpclient.MaxBufferedBody(0), fastRetry(pipeline.WithBreaker(b))}
			c := httpclient.New(opts...)
			served.Store(0)

			err := tc.do(t.Context(), c, httpclient.NewTransport(opts...))

			require.Error(t, err)
			counts := b.Counts()
			rt.mu.Lock()
			t.Logf("attempts %d %v, breaker %+v, class %v: %v", rt.n.Load(), rt.errs, counts, resilience.Classify(err), err)
			rt.mu.Unlock()
			assert.Equal(t, tc.wantAttempts, rt.n.Load(), "attempts")
			assert.Equal(t, tc.wantClass, resilience.Classify(err), "class")
			assert.False(t, resilience.IsPermanent(err) && tc.wantClass != resilience.ClassPermanent)
			assert.Zero(t, counts.TotalFailures, "breaker failures")
			assert.Zero(t, counts.TotalSuccesses, "breaker successes")
			assert.Equal(t, resilience.StateClosed, b.State())
			if tc.wantServed >= 0 {
				assert.Equal(t, tc.wantServed, served.Load(), "requests the dependency served")
			}
		})
	}
}

// TestLocalErrorsDoNotOpenTheBreaker is the scenario: a few calls
// to a mistyped URL do not open the breaker for a healthy dependency.
func TestLocalErrorsDoNotOpenTheBreaker(t *testing.T) {
	srv := newServer(t, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	b := breaker.New("orders", breaker.ConsecutiveFailures(3))
	c := httpclient.New(fastRetry(pipeline.WithBreaker(b)))
	for range 5 {
		require.Error(t, c.GetJSON(t.Context(), "localhost:8080/orders", nil))
	}
	assert.Equal(t, resilience.StateClosed, b.State())
	require.NoError(t, c.GetJSON(t.Context(), srv.URL, nil))
}
