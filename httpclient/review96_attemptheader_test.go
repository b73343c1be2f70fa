package httpclient

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/retrysignal"
)

func TestReview96CallerAttemptHeaderAnyCase(t *testing.T) {
	var mu sync.Mutex
	var seen [][]string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Values(retrysignal.AttemptHeader))
		n := len(seen)
		mu.Unlock()
		if n%2 == 1 {
			w.WriteHeader(503)
			return
		}
		w.WriteHeader(200)
	}))
	defer srv.Close()
	for _, p := range []*pipeline.Pipeline{
		pipeline.New(pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3)))),
		pipeline.New(pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3))), pipeline.WithHedging(hedge.New(hedge.Delay(1)))),
	} {
		tr := NewTransport(WithPipeline(p))
		for _, key := range []string{"request-attempt", "REQUEST-ATTEMPT", "Request-Attempt", "request-Attempt"} {
			mu.Lock()
			seen = nil
			mu.Unlock()
			req, _ := http.NewRequest("GET", srv.URL, nil)
			req.Header[key] = []string{"7/9"}
			req.Header["Request-attempt"] = []string{"8/9"}
			resp, err := tr.RoundTrip(req)
			if err == nil {
				resp.Body.Close()
			}
			mu.Lock()
			for _, v := range seen {
				if len(v) != 1 || v[0] == "7/9" || v[0] == "8/9" {
					t.Errorf("key %q: hop saw %q", key, v)
				}
			}
			mu.Unlock()
		}
	}
}
