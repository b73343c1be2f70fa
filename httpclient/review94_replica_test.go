package httpclient_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/httpclient"
)

// A -> plain round-robin load balancer -> {B1, B2} -> C. C is healthy; B1
// cannot reach it (its own fault: a bad route, a stale DNS entry, a
// port it cannot connect to). B1 retries, gives up, and answers 503 with
// the signal. A plain chain (or A without the signal) retries through the
// load balancer and reaches B2; with the signal, A stops at B1's answer.
func TestReview94_BadMiddleReplicaFailsCallsPlainChainCompletes(t *testing.T) {
	for _, trust := range []bool{false, true} {
		t.Run(map[bool]string{false: "signal-off", true: "signal-on"}[trust], func(t *testing.T) {
			review51Leak(t)
			c := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte(`{}`)) }))
			t.Cleanup(c.Close)
			ln, _ := net.Listen("tcp", "127.0.0.1:0")
			dead := "http://" + ln.Addr().String()
			ln.Close() // nothing listens there: refused
			b1 := review94Hop(t, httpclient.New(httpclient.WithPipeline(review94Pipe(3))), func() string { return dead })
			b2 := review94Hop(t, httpclient.New(httpclient.WithPipeline(review94Pipe(3))), func() string { return c.URL })
			u1, _ := url.Parse(b1.URL)
			u2, _ := url.Parse(b2.URL)
			var rr atomic.Int64
			lbTr := &http.Transport{}
			lb := httptest.NewServer(&httputil.ReverseProxy{
				Transport: lbTr,
				Rewrite: func(pr *httputil.ProxyRequest) {
					u := u1
					if rr.Add(1)%2 == 0 {
						u = u2
					}
					pr.SetURL(u)
				}})
			t.Cleanup(lb.Close)
			t.Cleanup(lbTr.CloseIdleConnections)
			opts := []httpclient.Option{httpclient.WithPipeline(review94Pipe(3))}
			if !trust {
				opts = append(opts, review94NoTrust)
			}
			a := httpclient.New(opts...)
			failed := 0
			const calls = 40
			for range calls {
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				if review94Get(ctx, a, lb.URL) != nil {
					failed++
				}
				cancel()
			}
			t.Logf("trust=%v: %d of %d user calls failed", trust, failed, calls)
			// docs/retries.md: with the signal, every call that meets B1
			// fails; without it, A's retry goes to B2.
			want := 0
			if trust {
				want = calls / 2
			}
			if failed != want {
				t.Errorf("trust=%v: %d of %d calls failed, want %d (docs/retries.md)", trust, failed, calls, want)
			}
		})
	}
}
