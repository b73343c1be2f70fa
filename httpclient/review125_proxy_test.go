package httpclient_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/retrysignal"
)

// A calls B, a service of its own network (trusted), which is a plain
// reverse proxy (nginx, or httputil.ReverseProxy on a plain Transport) in
// front of C, an internet server A's TrustNoRetry would never trust. C
// answers its first request 503 with No-Retry, which it has no right to
// (it retried nothing), and its second 200. Trusting B trusts what answers
// through it (TrustNoRetry's doc): the plain proxy relays C's signal and A
// does not retry; a gateway that drops the header, as the docs tell one in
// front of untrusted services to, lets A retry and complete.
func TestReview125_UntrustedSignalThroughPlainProxy(t *testing.T) {
	for _, drops := range []bool{false, true} {
		var calls atomic.Int32
		c := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if calls.Add(1) == 1 {
				w.Header().Set(retrysignal.NoRetryHeader, "1")
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			w.WriteHeader(http.StatusOK)
		}))
		defer c.Close()
		cu, _ := url.Parse(c.URL)
		proxy := httputil.NewSingleHostReverseProxy(cu) // plain: http.DefaultTransport
		if drops {
			proxy.ModifyResponse = func(r *http.Response) error {
				r.Header.Del(retrysignal.NoRetryHeader)
				return nil
			}
		}
		b := httptest.NewServer(proxy)
		defer b.Close()

		p := pipeline.New(pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond))))
		hc := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(p))}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", b.URL, nil)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		want, wantCalls := http.StatusServiceUnavailable, int32(1)
		if drops {
			want, wantCalls = http.StatusOK, 2
		}
		if resp.StatusCode != want || calls.Load() != wantCalls {
			t.Errorf("gateway drops the signal: %v: A got %d after %d request(s) to C, want %d after %d", drops, resp.StatusCode, calls.Load(), want, wantCalls)
		}
	}
}
