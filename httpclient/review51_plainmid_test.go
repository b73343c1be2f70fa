package httpclient_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/retrysignal"
)

func review51Proxy(t *testing.T, target string, rt http.RoundTripper) *httptest.Server {
	u, _ := url.Parse(target)
	rp := httputil.NewSingleHostReverseProxy(u)
	if rt != nil {
		rp.Transport = rt
	}
	s := httptest.NewServer(rp)
	t.Cleanup(s.Close)
	return s
}

// top -> A (toolkit) -> B (middle) -> C (toolkit) -> D failing 503.
func TestReview51_PlainMiddle(t *testing.T) {
	for _, kind := range []string{"reverseproxy", "plain502", "rp-on-httpclient-transport"} {
		t.Run(kind, func(t *testing.T) {
			d := review51NewBottom(t, false)
			d.status.Store(503)
			c := review51NewHop(t, "C", d.srv.URL, review51Opts{consecutive: 1 << 30})
			var b *httptest.Server
			switch kind {
			case "reverseproxy":
				b = review51Proxy(t, c.srv.URL, nil)
			case "rp-on-httpclient-transport":
				tr := httpclient.NewTransport(httpclient.WithPipeline(pipeline.New(pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(2*time.Millisecond), retrypolicy.MaxDelay(20*time.Millisecond))))))
				b = review51Proxy(t, c.srv.URL, tr)
			case "plain502":
				b = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					resp, err := http.Get(c.srv.URL)
					if err == nil {
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						if resp.StatusCode == 200 {
							w.WriteHeader(200)
							return
						}
					}
					http.Error(w, "bad gateway", 502)
				}))
				t.Cleanup(b.Close)
			}
			a := review51NewHop(t, "A", b.URL, review51Opts{consecutive: 1 << 30})
			top := review51Top(review51Opts{})
			const calls = 10
			for range calls {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_ = top.GetJSON(ctx, a.srv.URL, nil)
				cancel()
			}
			t.Logf("%s: per top call A %.1f C %.1f D %.1f", kind, float64(a.seen.Load())/calls, float64(c.seen.Load())/calls, float64(d.seen.Load())/calls)
			if kind != "plain502" && d.seen.Load() > 3*calls { // a hop that writes its own 502 drops the signal: 9
				t.Errorf("%s: D saw %.1f per top call: two layers retried", kind, float64(d.seen.Load())/calls)
			}
		})
	}
}

// The bottom of a 2-hop chain sits behind a plain (toolkit-less) D that fails;
// C is a ReverseProxy whose Transport is httpclient's: does the signal
// reach A? (httpclient's doc: retries happen at one layer.)
func TestReview51_ProxyOnTransport(t *testing.T) {
	d := review51NewBottom(t, false)
	d.status.Store(503)
	tr := httpclient.NewTransport(httpclient.WithPipeline(pipeline.New(pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(2*time.Millisecond), retrypolicy.MaxDelay(20*time.Millisecond))))))
	c := review51Proxy(t, d.srv.URL, tr)
	a := review51NewHop(t, "A", c.URL, review51Opts{consecutive: 1 << 30})
	top := review51Top(review51Opts{})
	const calls = 10
	for range calls {
		_ = top.GetJSON(context.Background(), a.srv.URL, nil)
	}
	t.Logf("per top call: A %.1f D %.1f", float64(a.seen.Load())/calls, float64(d.seen.Load())/calls)
	if d.seen.Load() > 3*calls {
		t.Errorf("D saw %.1f per top call through a ReverseProxy on httpclient.Transport: two layers retried", float64(d.seen.Load())/calls)
	}
}

// A public-looking host (mapped to loopback by the dialer) that sends the
// signal is not trusted: its answer is retried; a private one's is not.
func TestReview51_UntrustedSignal(t *testing.T) {
	var hits int
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits++
		w.Header().Set(retrysignal.NoRetryHeader, "1")
		w.Header().Set("Retry-After", "3600")
		http.Error(w, "x", 503)
	}))
	defer s.Close()
	_, port, _ := net.SplitHostPort(s.Listener.Addr().String())
	base := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, s.Listener.Addr().String())
	}}
	for _, host := range []string{"api.example.com", "example.com.", "10.1.2.3", "svc.internal", "foo", "169.254.1.1", "[::ffff:127.0.0.1]", "[fd00::1]", "localhost.", "LOCALHOST", "x.svc.cluster.local", "0.0.0.0", "[::]"} {
		hits = 0
		c := httpclient.New(httpclient.Base(base), httpclient.WithPipeline(pipeline.New(pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond), retrypolicy.MaxDelay(5*time.Millisecond))))))
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		start := time.Now()
		err := c.GetJSON(ctx, fmt.Sprintf("http://%s:%s/", host, port), nil)
		cancel()
		t.Logf("%-22s hits %d in %v: %v", host, hits, time.Since(start).Round(time.Millisecond), err)
		want := 1 // trusted: not retried
		switch host {
		case "api.example.com", "example.com.", "169.254.1.1", "0.0.0.0", "[::]":
			want = 3
		}
		if hits != want {
			t.Errorf("%s: %d attempts, want %d", host, hits, want)
		}
	}
}
