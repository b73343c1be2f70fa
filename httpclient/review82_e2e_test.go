package httpclient

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/retrysignal"
)

func TestReview82_ProxyE2E(t *testing.T) {
	for _, tc := range []struct {
		name  string
		hold  time.Duration
		after time.Duration
		want  int32
	}{
		{"hedged", 40 * time.Millisecond, 10 * time.Millisecond, 2},
		// The hedge is due long after the backend's answer: under load, a
		// 10 ms delay can pass before an instant answer comes back.
		{"unhedged", 0, time.Minute, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var n atomic.Int32
			back := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n.Add(1)
				time.Sleep(tc.hold)
				w.WriteHeader(http.StatusServiceUnavailable)
			}))
			defer back.Close()
			u, _ := url.Parse(back.URL)
			rp := httputil.NewSingleHostReverseProxy(u)
			rp.Transport = NewTransport(WithPipeline(pipeline.New(
				pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(1))),
				pipeline.WithHedging(hedge.New(hedge.Delay(tc.after), hedge.MaxShare(1))))))
			rp.ErrorHandler = retrysignal.ProxyErrorHandler
			mid := httptest.NewServer(rp)
			defer mid.Close()
			front := NewTransport(WithPipeline(pipeline.New(pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond))))))
			req, _ := http.NewRequest(http.MethodPut, mid.URL, bytes.NewReader([]byte("x")))
			resp, err := front.RoundTrip(req)
			if resp != nil {
				resp.Body.Close()
			}
			if n.Load() != tc.want {
				t.Errorf("backend saw %d, want %d (err %v)", n.Load(), tc.want, err)
			}
		})
	}
}
