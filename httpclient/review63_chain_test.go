package httpclient_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/deadline"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/retrysignal"
)

func r63Pipeline(b *breaker.Breaker) *pipeline.Pipeline {
	opts := []pipeline.Option{pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3),
		retrypolicy.BaseDelay(time.Millisecond), retrypolicy.MaxDelay(2*time.Millisecond)))}
	if b != nil {
		opts = append(opts, pipeline.WithBreaker(b))
	}
	return pipeline.New(opts...)
}

// r63Hop is a service whose handler forwards GET to next with an
// httpclient.Transport that retries, through retrysignal.Handler.
func r63Hop(t *testing.T, next string, b *breaker.Breaker) *httptest.Server {
	hc := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(r63Pipeline(b)))}
	h := retrysignal.Handler(func(w http.ResponseWriter, r *http.Request) error {
		req, _ := http.NewRequestWithContext(r.Context(), http.MethodGet, next, nil)
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode >= 400 {
			// The Transport hands back the last answer: an SDK-like handler marks it.
			for k, v := range resp.Header {
				w.Header()[k] = v
			}
			w.WriteHeader(resp.StatusCode)
			_, _ = io.Copy(w, resp.Body)
			return nil
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
		return nil
	})
	s := httptest.NewServer(deadline.Middleware(retrysignal.Middleware(h)))
	t.Cleanup(s.Close)
	return s
}

// r63Proxy is an httputil.ReverseProxy on an httpclient.Transport.
func r63Proxy(t *testing.T, next string) *httptest.Server {
	u, _ := url.Parse(next)
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.Transport = httpclient.NewTransport(httpclient.WithPipeline(r63Pipeline(nil)))
	rp.ErrorHandler = retrysignal.ProxyErrorHandler // as the package doc says: the default answers no answer without the signal
	s := httptest.NewServer(deadline.Middleware(retrysignal.Middleware(rp)))
	t.Cleanup(s.Close)
	return s
}

// r63Closer reads each request and closes the connection without an answer.
func r63Closer(t *testing.T, n *atomic.Int64) *httptest.Server {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	t.Cleanup(s.Close)
	return s
}

func r63User(t *testing.T, top string) (int, http.Header) {
	hc := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(r63Pipeline(nil)))}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, top, nil)
	resp, err := hc.Do(req)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.Header
}

// A chain user -> P1 -> P2 -> D of reverse proxies on the Transport (the
// use the package doc names), D dropping every connection: the retrying
// layer is P2; the promise bounds D's requests to P2's 3.
func TestReview63_ReverseProxyChainNoAnswer(t *testing.T) {
	var n atomic.Int64
	d := r63Closer(t, &n)
	p2 := r63Proxy(t, d.URL)
	p1 := r63Proxy(t, p2.URL)
	status, h := r63User(t, p1.URL)
	t.Logf("user got %d No-Retry=%q; D got %d requests", status, h.Get(retrysignal.NoRetryHeader), n.Load())
	if n.Load() > 3 {
		t.Errorf("D got %d requests for one user request through 2 retrying proxies; one layer retries: want <= 3", n.Load())
	}
}

// The same with D answering 503: the signal should bound it to 3.
func TestReview63_ReverseProxyChain503(t *testing.T) {
	var n atomic.Int64
	d := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(d.Close)
	top := d.URL
	for range 5 {
		top = r63Proxy(t, top).URL
	}
	status, h := r63User(t, top)
	t.Logf("user got %d No-Retry=%q; D got %d", status, h.Get(retrysignal.NoRetryHeader), n.Load())
	if n.Load() > 3 {
		t.Errorf("D got %d requests, want <= 3", n.Load())
	}
}

// Handler hops (retrysignal.Handler), 6 deep, D dropping connections.
func TestReview63_HandlerChainNoAnswer(t *testing.T) {
	var n atomic.Int64
	d := r63Closer(t, &n)
	top := d.URL
	for range 6 {
		top = r63Hop(t, top, nil).URL
	}
	status, h := r63User(t, top)
	t.Logf("user got %d No-Retry=%q; D got %d", status, h.Get(retrysignal.NoRetryHeader), n.Load())
	if n.Load() > 3 {
		t.Errorf("D got %d requests, want <= 3", n.Load())
	}
}

// Do no harm: D fails its first request of each user call and then
// recovers; a chain of retrying hops must complete every user call.
func TestReview63_HandlerChainBlipCompletes(t *testing.T) {
	var n atomic.Int64
	d := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1)%2 == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(d.Close)
	top := d.URL
	for range 5 {
		top = r63Hop(t, top, nil).URL
	}
	var bad atomic.Int64
	for range 50 {
		if s, _ := r63User(t, top); s != 200 {
			bad.Add(1)
		}
	}
	t.Logf("D got %d, %d of 50 user calls failed", n.Load(), bad.Load())
	if bad.Load() > 0 {
		t.Errorf("%d of 50 user calls failed against a dependency that answers every other request", bad.Load())
	}
}

// D refuses connections (down): P2, the proxy above it, should be the only
// layer that retries: P1 must not resend the request to P2.
func TestReview63_ReverseProxyChainRefused(t *testing.T) {
	d := httptest.NewServer(http.NotFoundHandler())
	dURL := d.URL
	d.Close() // refused from now on
	var atP2 atomic.Int64
	p2 := r63Proxy(t, dURL)
	count := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		atP2.Add(1)
		p2.Config.Handler.ServeHTTP(w, r)
	}))
	t.Cleanup(count.Close)
	p1 := r63Proxy(t, count.URL)
	status, h := r63User(t, p1.URL)
	t.Logf("user got %d No-Retry=%q; P2 got %d requests (so D got %d dials)", status, h.Get(retrysignal.NoRetryHeader), atP2.Load(), 3*atP2.Load())
	if atP2.Load() > 1 {
		t.Errorf("P2 got %d requests: P1 retried what P2 had retried", atP2.Load())
	}
}
