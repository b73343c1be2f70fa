package httpclient_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/retrysignal"
)

type rtFunc52 func(*http.Request) (*http.Response, error)

func (f rtFunc52) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func quickPipe52(n int, extra ...pipeline.Option) *pipeline.Pipeline {
	return pipeline.New(append([]pipeline.Option{pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(n), retrypolicy.BaseDelay(time.Millisecond), retrypolicy.MaxDelay(2*time.Millisecond)))}, extra...)...)
}

// A base RoundTripper whose responses have a nil Header, for a retried and
// a single-attempt request, many at once.
func TestReview52_NilHeaderBase(t *testing.T) {
	var calls atomic.Int64
	base := rtFunc52(func(r *http.Request) (*http.Response, error) {
		calls.Add(1)
		if r.Body != nil {
			io.Copy(io.Discard, r.Body)
			r.Body.Close()
		}
		return &http.Response{StatusCode: 503, Body: io.NopCloser(strings.NewReader("x")), Request: r}, nil
	})
	tr := httpclient.NewTransport(httpclient.Base(base), httpclient.WithPipeline(quickPipe52(3)))
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			method := http.MethodGet
			if i%2 == 1 {
				method = http.MethodPost
			}
			req, _ := http.NewRequest(method, "http://example.invalid/x", strings.NewReader("b"))
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Errorf("%s: err %v", method, err)
				return
			}
			defer resp.Body.Close()
			got := resp.Header.Get(retrysignal.NoRetryHeader)
			if method == http.MethodGet && got != "1" {
				t.Errorf("GET retried: No-Retry %q", got)
			}
			if method == http.MethodPost && got != "" {
				t.Errorf("POST sent once: No-Retry %q", got)
			}
		}()
	}
	wg.Wait()
}

// The dependency's own No-Retry on a response the Transport sent once
// (POST without key) is removed; a shared header map from the base is
// mutated (race detector).
func TestReview52_SharedHeaderFromBase(t *testing.T) {
	shared := http.Header{"Content-Type": {"text/plain"}}
	base := rtFunc52(func(r *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 503, Header: shared, Body: io.NopCloser(strings.NewReader("x")), Request: r}, nil
	})
	tr := httpclient.NewTransport(httpclient.Base(base), httpclient.WithPipeline(quickPipe52(2)))
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest(http.MethodGet, "http://example.invalid/x", nil)
			resp, err := tr.RoundTrip(req)
			if err == nil {
				_ = resp.Header.Get("Content-Type")
				resp.Body.Close()
			}
		}()
	}
	wg.Wait()
}

// A -> B (ReverseProxy on the Transport) -> C: counts C's hits when A
// itself retries with another Transport trusting B.
func TestReview52_ProxyChain(t *testing.T) {
	for _, tc := range []struct {
		name    string
		method  string
		cStatus int
		budgetB time.Duration
		cDelay  time.Duration
		maxHits int64 // at C
	}{
		{"GET 503", http.MethodGet, 503, 0, 0, 3},
		{"POST 503 (B once, A retries)", http.MethodPost, 503, 0, 0, 3},
		{"GET 500", http.MethodGet, 500, 0, 0, 1},
		{"GET slow, B own budget", http.MethodGet, 200, 150 * time.Millisecond, 300 * time.Millisecond, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var hits atomic.Int64
			c := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				hits.Add(1)
				if tc.cDelay > 0 {
					select {
					case <-time.After(tc.cDelay):
					case <-r.Context().Done():
						return
					}
				}
				if tc.method == http.MethodPost && r.Header.Get("Idempotency-Key") == "" {
					w.Header().Set(retrysignal.NoRetryHeader, "1") // C's own: must not pass through B
				}
				w.WriteHeader(tc.cStatus)
			}))
			defer c.Close()
			var popts []pipeline.Option
			if tc.budgetB > 0 {
				popts = append(popts, pipeline.WithTimeBudget(tc.budgetB))
			}
			trB := httpclient.NewTransport(httpclient.WithPipeline(quickPipe52(3, popts...)), httpclient.TrustNoRetry(func(*url.URL) bool { return false }))
			cu, _ := url.Parse(c.URL)
			rp := httputil.NewSingleHostReverseProxy(cu)
			rp.Transport = trB
			b := httptest.NewServer(rp)
			defer b.Close()
			trA := httpclient.NewTransport(httpclient.WithPipeline(quickPipe52(3)), httpclient.TrustNoRetry(func(*url.URL) bool { return true }))
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, tc.method, b.URL, strings.NewReader("body"))
			resp, err := trA.RoundTrip(req)
			status := 0
			if err == nil {
				status = resp.StatusCode
				resp.Body.Close()
			}
			t.Logf("C hits=%d status=%d err=%v", hits.Load(), status, err)
			if hits.Load() > tc.maxHits {
				t.Errorf("C hit %d times, want at most %d (retries at two layers)", hits.Load(), tc.maxHits)
			}
		})
	}
}

// HTTP/2 upstream: the header set on an h2 response.
func TestReview52_H2(t *testing.T) {
	c := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(retrysignal.NoRetryHeader, "1")
		w.WriteHeader(503)
	}))
	c.EnableHTTP2 = true
	c.StartTLS()
	defer c.Close()
	tr := httpclient.NewTransport(httpclient.Base(c.Client().Transport), httpclient.WithPipeline(quickPipe52(3)), httpclient.TrustNoRetry(func(*url.URL) bool { return false }))
	for _, m := range []string{http.MethodGet, http.MethodPost} {
		req, _ := http.NewRequest(m, c.URL, strings.NewReader("x"))
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s proto=%s No-Retry=%q", m, resp.Proto, resp.Header.Get(retrysignal.NoRetryHeader))
		if m == http.MethodPost && resp.Header.Get(retrysignal.NoRetryHeader) != "" {
			t.Errorf("POST once: dependency's No-Retry passed on")
		}
		if m == http.MethodGet && resp.Header.Get(retrysignal.NoRetryHeader) != "1" {
			t.Errorf("GET retried: no No-Retry")
		}
		resp.Body.Close()
	}
}
