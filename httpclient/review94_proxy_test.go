package httpclient_test

import (
	"context"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/deadline"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrysignal"
)

// A -> P1 -> P2 -> D, P1 and P2 reverse proxies on httpclient's Transport
// with ProxyErrorHandler, 3 attempts everywhere.
func TestReview94_ProxyChainBound(t *testing.T) {
	modes := map[string]review94Mode{"503": r94503, "reset": r94Reset, "close": r94Close, "flap": r94Flap, "hang": r94Hang}
	for name, mode := range modes {
		for _, hedged := range []bool{false, true} {
			t.Run(name+map[bool]string{false: "", true: "/hedged"}[hedged], func(t *testing.T) {
				review51Leak(t)
				var dn atomic.Int64
				d := review94D(t, mode, &dn)
				proxy := func(next string, p *pipeline.Pipeline) *httptest.Server {
					u, _ := url.Parse(next)
					tr := httpclient.NewTransport(httpclient.WithPipeline(p))
					rp := &httputil.ReverseProxy{Transport: tr, ErrorHandler: retrysignal.ProxyErrorHandler,
						Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(u) }}
					s := httptest.NewServer(deadline.Middleware(rp))
					t.Cleanup(s.Close)
					t.Cleanup(tr.CloseIdleConnections)
					return s
				}
				last := review94Pipe(3, pipeline.WithAttemptTimeout(100*time.Millisecond))
				if hedged {
					last = review94Hedged(3, 20*time.Millisecond, pipeline.WithAttemptTimeout(100*time.Millisecond))
				}
				p2 := proxy(d.URL, last)
				p1 := proxy(p2.URL, review94Pipe(3))
				a := httpclient.New(httpclient.WithPipeline(review94Pipe(3, pipeline.WithTimeBudget(2*time.Second))))
				const users = 10
				var wg sync.WaitGroup
				for range users {
					wg.Add(1)
					go func() {
						defer wg.Done()
						_ = review94Get(context.Background(), a, p1.URL)
					}()
				}
				wg.Wait()
				per := float64(dn.Load()) / users
				limit := 3.0
				if hedged {
					limit = 6
				}
				t.Logf("D per user %.2f", per)
				if per > limit {
					t.Errorf("D got %.2f per user call, over %v", per, limit)
				}
			})
		}
	}
}
