package httpclient_test

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

func r113Pipeline(b *breaker.Breaker) *pipeline.Pipeline {
	opts := []pipeline.Option{pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond), retrypolicy.MaxDelay(2*time.Millisecond)))}
	if b != nil {
		opts = append(opts, pipeline.WithBreaker(b))
	}
	return pipeline.New(opts...)
}

func r113Echo(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Trailer-Sum", r.Trailer.Get("X-Sum"))
		w.Write(b)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// A request whose GetBody fails (a body that can be sent once, with a
// GetBody that says so) but whose Body reads: net/http sends Body on the
// first attempt and never calls GetBody; the Transport must not fail it.
func TestReview113_FailingGetBodyFirstAttempt(t *testing.T) {
	srv := r113Echo(t)
	for _, name := range []string{"plain", "httpclient"} {
		t.Run(name, func(t *testing.T) {
			var rt http.RoundTripper = http.DefaultTransport
			if name == "httpclient" {
				rt = httpclient.NewTransport(httpclient.WithPipeline(r113Pipeline(nil)))
			}
			req, _ := http.NewRequest(http.MethodPut, srv.URL, strings.NewReader("hello"))
			req.GetBody = func() (io.ReadCloser, error) { return nil, errors.New("body cannot be rewound") }
			resp, err := (&http.Client{Transport: rt}).Do(req)
			if err != nil {
				t.Fatalf("%s: a request a plain client completes failed: %v", name, err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(b) != "hello" {
				t.Fatalf("%s: body %q", name, b)
			}
		})
	}
}

// progressBody counts what the caller's Body gave and, at its end, sets a
// trailer (net/http's documented way: fill Request.Trailer as Body is read
// to its end).
type progressBody struct {
	r    io.Reader
	n    *atomic.Int64
	sum  int
	tr   http.Header
	done bool
}

func (p *progressBody) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.n.Add(int64(n))
	for _, c := range b[:n] {
		p.sum += int(c)
	}
	if err == io.EOF && !p.done {
		p.done = true
		p.tr.Set("X-Sum", strings.Repeat("x", p.sum%7+1))
	}
	return n, err
}
func (p *progressBody) Close() error { return nil }

// A caller that wraps Body (a progress meter, a checksum into a trailer)
// after http.NewRequest set GetBody: net/http reads the caller's Body on
// the first attempt.
func TestReview113_WrappedBodyIsRead(t *testing.T) {
	srv := r113Echo(t)
	for _, name := range []string{"plain", "httpclient"} {
		t.Run(name, func(t *testing.T) {
			var rt http.RoundTripper = http.DefaultTransport
			if name == "httpclient" {
				rt = httpclient.NewTransport(httpclient.WithPipeline(r113Pipeline(nil)))
			}
			req, _ := http.NewRequest(http.MethodPut, srv.URL, bytes.NewReader([]byte("hello world")))
			var n atomic.Int64
			req.Trailer = http.Header{"X-Sum": nil}
			req.ContentLength = -1
			req.Body = &progressBody{r: req.Body, n: &n, tr: req.Trailer}
			resp, err := (&http.Client{Transport: rt}).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if n.Load() != int64(len("hello world")) {
				t.Errorf("%s: the caller's Body gave %d bytes, want %d (a progress meter on it shows nothing)", name, n.Load(), len("hello world"))
			}
			if resp.Header.Get("X-Trailer-Sum") == "" {
				t.Errorf("%s: the trailer the caller's Body sets at its end did not reach the server", name)
			}
		})
	}
}

// gzipRT compresses the request body on its way down, as a middleware
// RoundTripper does: it replaces Body (and its length) and leaves the
// GetBody that http.NewRequest set, which net/http calls only to send the
// body again.
type gzipRT struct{ next http.RoundTripper }

func (g gzipRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	io.Copy(zw, r.Body)
	r.Body.Close()
	zw.Close()
	r.Body = io.NopCloser(&buf)
	r.ContentLength = int64(buf.Len())
	r.Header.Set("Content-Encoding", "gzip")
	return g.next.RoundTrip(r)
}

// A body replaced by a RoundTripper above the Transport: net/http sends
// the Body it is given. The Transport must not send the stale GetBody's
// bytes instead (under the new Content-Encoding and length).
func TestReview113_ReplacedBodyIsSent(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, "not gzip: "+err.Error(), 400)
			return
		}
		b, _ := io.ReadAll(zr)
		w.Write(b)
	}))
	defer srv.Close()
	for _, name := range []string{"plain", "httpclient"} {
		t.Run(name, func(t *testing.T) {
			var rt http.RoundTripper = http.DefaultTransport
			if name == "httpclient" {
				rt = httpclient.NewTransport(httpclient.WithPipeline(r113Pipeline(nil)))
			}
			for _, method := range []string{http.MethodPut, http.MethodPost} {
				req, _ := http.NewRequest(method, srv.URL, strings.NewReader(`{"order":42}`))
				resp, err := (&http.Client{Transport: gzipRT{rt}}).Do(req)
				if err != nil {
					t.Errorf("%s %s: %v", name, method, err)
					continue
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || string(b) != `{"order":42}` {
					t.Errorf("%s %s: %d %q: the server did not get the body the Transport was given", name, method, resp.StatusCode, b)
				}
			}
		})
	}
}
