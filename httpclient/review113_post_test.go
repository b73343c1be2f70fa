package httpclient_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"time"
)

// A POST without a key that the server ran and then lost the answer of
// (connection cut), or answered 503 slowly (past a hedging delay): the
// server runs it once, over a warm connection too, hedging on.
func TestReview113_PostWithoutKeyRunsOnce(t *testing.T) {
	for _, mode := range []string{"cut", "slow503", "429"} {
		t.Run(mode, func(t *testing.T) {
			var posts atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method != http.MethodPost {
					return
				}
				io.ReadAll(r.Body)
				posts.Add(1)
				switch mode {
				case "cut":
					c, _, _ := w.(http.Hijacker).Hijack()
					c.Close()
				case "slow503":
					time.Sleep(30 * time.Millisecond)
					w.WriteHeader(503)
				case "429":
					w.Header().Set("Retry-After", "0")
					w.WriteHeader(429)
				}
			}))
			defer srv.Close()
			p := pipeline.New(pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(time.Millisecond), retrypolicy.MaxDelay(time.Millisecond))),
				pipeline.WithHedging(hedge.New(hedge.Delay(5*time.Millisecond), hedge.MaxShare(1))))
			hc := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(p))}
			warm, err := hc.Get(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			warm.Body.Close()
			for _, body := range []func() io.Reader{
				func() io.Reader { return strings.NewReader("a") },                    // GetBody
				func() io.Reader { return io.MultiReader(strings.NewReader("a")) },    // unknown length
				func() io.Reader { return io.LimitReader(strings.NewReader("a"), 1) }, // known below
			} {
				posts.Store(0)
				req, _ := http.NewRequest(http.MethodPost, srv.URL, body())
				if _, ok := body().(*strings.Reader); !ok && req.ContentLength == 0 {
					req.ContentLength = -1
				}
				resp, err := hc.Do(req)
				if err == nil {
					resp.Body.Close()
				}
				time.Sleep(50 * time.Millisecond)
				if posts.Load() != 1 {
					t.Fatalf("a POST without a key ran %d times (err %v)", posts.Load(), err)
				}
			}
		})
	}
}
