package httpclient_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/deadline"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/retrysignal"
)

func review158Pipe() *pipeline.Pipeline {
	return pipeline.New(pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3),
		retrypolicy.BaseDelay(time.Millisecond), retrypolicy.MaxDelay(2*time.Millisecond))))
}

// review158Server starts a server, HTTP/2 over TLS if h2.
func review158Server(t *testing.T, h http.Handler, h2 bool) (*httptest.Server, http.RoundTripper) {
	t.Helper()
	if !h2 {
		s := httptest.NewServer(h)
		t.Cleanup(s.Close)
		tr := &http.Transport{}
		t.Cleanup(tr.CloseIdleConnections)
		return s, tr
	}
	s := httptest.NewUnstartedServer(h)
	s.EnableHTTP2 = true
	s.StartTLS()
	t.Cleanup(s.Close)
	tr := s.Client().Transport.(*http.Transport).Clone()
	tr.ForceAttemptHTTP2 = true
	t.Cleanup(tr.CloseIdleConnections)
	return s, tr
}

// hop is a service whose handler GETs next through a resilient Client and
// answers its failure through retrysignal.Handler.
func review158Hop(t *testing.T, next *httptest.Server, nextRT http.RoundTripper, h2 bool) (*httptest.Server, http.RoundTripper) {
	c := httpclient.New(httpclient.WithPipeline(review158Pipe()), httpclient.Base(nextRT))
	h := deadline.Middleware(retrysignal.Middleware(retrysignal.Handler(func(w http.ResponseWriter, r *http.Request) error {
		var out map[string]any
		if err := c.GetJSON(r.Context(), next.URL, &out); err != nil {
			return err
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{}`))
		return nil
	})))
	return review158Server(t, h, h2)
}

// proxyHop is a reverse proxy on httpclient's Transport with
// retrysignal.ProxyErrorHandler.
func review158Proxy(t *testing.T, next *httptest.Server, nextRT http.RoundTripper, h2 bool) (*httptest.Server, http.RoundTripper) {
	u, _ := url.Parse(next.URL)
	p := httputil.NewSingleHostReverseProxy(u)
	p.Transport = httpclient.NewTransport(httpclient.WithPipeline(review158Pipe()), httpclient.Base(nextRT))
	p.ErrorHandler = retrysignal.ProxyErrorHandler
	return review158Server(t, deadline.Middleware(retrysignal.Middleware(p)), h2)
}

// A chain A -> B -> C -> D, 3 attempts at each hop: D is never reached more
// than 3 times per user request, whatever way it fails, over HTTP/1.1 or
// HTTP/2, with plain hops or a reverse proxy in the middle.
func TestReview158_ChainOneLayer(t *testing.T) {
	modes := map[string]http.HandlerFunc{
		"503": func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(503) },
		"500": func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(500) },
		"404": func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(404) },
		"429 long Retry-After": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", "30")
			w.WriteHeader(429)
		},
		"503 short Retry-After": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(503)
		},
		"reset": func(w http.ResponseWriter, r *http.Request) {
			if hj, ok := w.(http.Hijacker); ok {
				c, _, err := hj.Hijack()
				if err == nil {
					if tc, ok := c.(*net.TCPConn); ok {
						_ = tc.SetLinger(0)
					}
					c.Close()
					return
				}
			}
			panic(http.ErrAbortHandler) // HTTP/2: RST_STREAM
		},
		"bad JSON 200": func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("{")) },
		"302 loop": func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, r.URL.Path, http.StatusFound)
		},
		"304": func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(304) },
	}
	for _, h2 := range []bool{false, true} {
		for _, proxied := range []bool{false, true} {
			for name, mode := range modes {
				t.Run(fmt.Sprintf("h2=%v/proxy=%v/%s", h2, proxied, name), func(t *testing.T) {
					var hits atomic.Int32
					d, dRT := review158Server(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						hits.Add(1)
						mode(w, r)
					}), h2)
					c, cRT := review158Hop(t, d, dRT, h2)
					if proxied {
						c, cRT = review158Proxy(t, d, dRT, h2)
					}
					b, bRT := review158Hop(t, c, cRT, h2)
					a := httpclient.New(httpclient.WithPipeline(review158Pipe()), httpclient.Base(bRT))
					ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
					defer cancel()
					err := a.GetJSON(ctx, b.URL, nil)
					if err == nil {
						t.Fatal("the call succeeded")
					}
					t.Logf("D requests %d, err %v", hits.Load(), err)
					if n := hits.Load(); n > 3 && name != "302 loop" || n > 33 {
						t.Fatalf("D got %d requests for one user request (one layer retries: at most 3); err %v", n, err)
					}
				})
			}
		}
	}
}

// review158HopWith is review158Hop with a given client.
func review158HopWith(t *testing.T, next *httptest.Server, c *httpclient.Client, h2 bool) (*httptest.Server, http.RoundTripper) {
	h := deadline.Middleware(retrysignal.Middleware(retrysignal.Handler(func(w http.ResponseWriter, r *http.Request) error {
		if err := c.GetJSON(r.Context(), next.URL, nil); err != nil {
			return err
		}
		_, _ = w.Write([]byte(`{}`))
		return nil
	})))
	return review158Server(t, h, h2)
}
