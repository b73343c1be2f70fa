package retrysignal_test

import (
	"context"
	"errors"
	"net"
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

func review69Proxy(t *testing.T, target string, tr http.RoundTripper, mod func(*httputil.ReverseProxy)) *httptest.Server {
	u, _ := url.Parse(target)
	p := httputil.NewSingleHostReverseProxy(u)
	p.Transport = tr
	p.ErrorHandler = retrysignal.ProxyErrorHandler
	if mod != nil {
		mod(p)
	}
	s := httptest.NewServer(deadline.Middleware(retrysignal.Middleware(p)))
	// After the servers close (cleanups run last first): the connections
	// the default transport keeps would outlive the test (goleak).
	t.Cleanup(http.DefaultTransport.(*http.Transport).CloseIdleConnections)
	t.Cleanup(s.Close)
	return s
}

func review69Resetter(t *testing.T, hits *atomic.Int64) *httptest.Server {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		c, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			if tc, ok := c.(*net.TCPConn); ok {
				tc.SetLinger(0)
			}
			c.Close()
		}
	}))
	t.Cleanup(s.Close)
	return s
}

func review69Transport(b *breaker.Breaker, extra ...pipeline.Option) *httpclient.Transport {
	opts := []pipeline.Option{pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond)))}
	if b != nil {
		opts = append(opts, pipeline.WithBreaker(b))
	}
	opts = append(opts, extra...)
	return httpclient.NewTransport(httpclient.WithPipeline(pipeline.New(opts...)))
}

// Do no harm: a POST without a key is sent once; when that one attempt
// fails with no answer, the proxy must not tell its caller not to retry.
func TestReview69ProxyPostOnceNoSignal(t *testing.T) {
	var hits atomic.Int64
	dep := review69Resetter(t, &hits)
	px := review69Proxy(t, dep.URL, review69Transport(nil), nil)
	resp, err := http.Post(px.URL+"/x", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	t.Logf("POST, reset: status %d, signal %q, dependency hits %d", resp.StatusCode, resp.Header.Get(retrysignal.NoRetryHeader), hits.Load())
	if retrysignal.NoRetry(resp.Header) && hits.Load() == 1 {
		t.Errorf("a single plain attempt that failed was answered with the signal")
	}
}

// A POST without a key, single attempt, timing out on the pipeline's
// attempt timeout (not the caller's deadline): no signal.
func TestReview69ProxyPostAttemptTimeoutNoSignal(t *testing.T) {
	var hits atomic.Int64
	dep := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		select {
		case <-r.Context().Done():
		case <-time.After(2 * time.Second):
		}
	}))
	defer dep.Close()
	for _, opt := range []pipeline.Option{pipeline.WithAttemptTimeout(100 * time.Millisecond), pipeline.WithTimeBudget(100 * time.Millisecond)} {
		hits.Store(0)
		px := review69Proxy(t, dep.URL, review69Transport(nil, opt), nil)
		resp, err := http.Post(px.URL+"/x", "text/plain", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		t.Logf("POST, slow: status %d, signal %q, hits %d", resp.StatusCode, resp.Header.Get(retrysignal.NoRetryHeader), hits.Load())
		if retrysignal.NoRetry(resp.Header) && hits.Load() == 1 {
			t.Errorf("a single plain attempt that timed out on this hop's own timeout was answered with the signal")
		}
	}
}

// Two proxies, 3 attempts each, dependency resets: 3 hits, not 9; and a
// refused connection (nothing listening).
func TestReview69ProxyChain(t *testing.T) {
	var hits atomic.Int64
	dep := review69Resetter(t, &hits)
	inner := review69Proxy(t, dep.URL, review69Transport(nil), nil)
	outer := review69Proxy(t, inner.URL, review69Transport(nil), nil)
	resp, err := http.Get(outer.URL + "/x")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	t.Logf("chain: status %d signal %q hits %d", resp.StatusCode, resp.Header.Get(retrysignal.NoRetryHeader), hits.Load())
	if hits.Load() > 3 {
		t.Errorf("chain of 2 proxies x 3 attempts: %d hits", hits.Load())
	}
	// refused
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := l.Addr().String()
	l.Close()
	inner2 := review69Proxy(t, "http://"+addr, review69Transport(nil), nil)
	var innerHits atomic.Int64
	counted := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		innerHits.Add(1)
		u, _ := url.Parse(inner2.URL)
		httputil.NewSingleHostReverseProxy(u).ServeHTTP(w, r)
	}))
	defer counted.Close()
	outer2 := review69Proxy(t, counted.URL, review69Transport(nil), nil)
	resp, err = http.Get(outer2.URL + "/x")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	t.Logf("refused chain: status %d signal %q inner hits %d", resp.StatusCode, resp.Header.Get(retrysignal.NoRetryHeader), innerHits.Load())
	if innerHits.Load() > 1 {
		t.Errorf("outer proxy retried an inner proxy that answered with the signal: %d", innerHits.Load())
	}
}

// A caller that cancels: nothing counts against the dependency (the
// breaker opens after 2 consecutive failures).
func TestReview69ProxyCallerCancels(t *testing.T) {
	var hits atomic.Int64
	dep := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		select {
		case <-r.Context().Done():
		case <-time.After(3 * time.Second):
		}
	}))
	defer dep.Close()
	b := breaker.New("dep", breaker.ConsecutiveFailures(2))
	var status atomic.Int64
	var errh atomic.Value
	px := review69Proxy(t, dep.URL, review69Transport(b), func(p *httputil.ReverseProxy) {
		p.ErrorHandler = func(w http.ResponseWriter, r *http.Request, err error) {
			errh.Store(err.Error())
			rec := httptest.NewRecorder()
			retrysignal.ProxyErrorHandler(rec, r, err)
			status.Store(int64(rec.Code))
			retrysignal.ProxyErrorHandler(w, r, err)
		}
	})
	for range 5 {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		req, _ := http.NewRequestWithContext(ctx, "GET", px.URL+"/x", nil)
		_, err := http.DefaultClient.Do(req)
		cancel()
		if err == nil {
			t.Fatal("expected an error")
		}
	}
	time.Sleep(100 * time.Millisecond)
	t.Logf("caller canceled: proxy answered %d (err %v); breaker %v counts %+v", status.Load(), errh.Load(), b.State(), b.Counts())
	if b.Check() != nil {
		t.Errorf("5 canceled callers opened the breaker: %v", b.Counts())
	}
}

// The proxy's own ModifyResponse rejecting an answer: not the dependency's
// failure, no signal; and a 503 from the dependency after retries.
func TestReview69ProxyModifyResponseAnd503(t *testing.T) {
	var hits atomic.Int64
	dep := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.URL.Path == "/503" {
			w.WriteHeader(503)
			return
		}
		w.Write([]byte("ok"))
	}))
	defer dep.Close()
	b := breaker.New("dep", breaker.ConsecutiveFailures(2))
	px := review69Proxy(t, dep.URL, review69Transport(b), func(p *httputil.ReverseProxy) {
		p.ModifyResponse = func(r *http.Response) error {
			if r.Request.URL.Path == "/reject" {
				return errors.New("proxy policy rejects this")
			}
			return nil
		}
	})
	for range 3 {
		resp, err := http.Get(px.URL + "/reject")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		t.Logf("ModifyResponse rejects: %d signal %q", resp.StatusCode, resp.Header.Get(retrysignal.NoRetryHeader))
		if retrysignal.NoRetry(resp.Header) {
			t.Errorf("a ModifyResponse rejection, not retried by anyone, answered with the signal")
		}
	}
	if b.Check() != nil {
		t.Errorf("ModifyResponse rejections of good answers opened the breaker")
	}
	hits.Store(0)
	resp, err := http.Get(px.URL + "/503")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	t.Logf("503: %d signal %q hits %d", resp.StatusCode, resp.Header.Get(retrysignal.NoRetryHeader), hits.Load())
}
