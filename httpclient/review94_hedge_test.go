package httpclient_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/retrysignal"
)

// A hedges its call to B. B's first request meets C's outage (C 503s it,
// B retries, answers 503 + No-Retry); the hedge, sent meanwhile, is served
// (C is back). Without the signal, A waits for the hedge out and succeeds;
// with it, does the first attempt's "don't retry" answer throw away the
// hedge already in flight?
func TestReview94_NoRetryAbandonsHedgeInFlight(t *testing.T) {
	for _, trust := range []bool{false, true} {
		t.Run(map[bool]string{false: "signal-off", true: "signal-on"}[trust], func(t *testing.T) {
			review51Leak(t)
			var cReqs atomic.Int64
			c := httptest.NewServer(review94Count(&cReqs, func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Query().Get("hedge") == "1" {
					_, _ = w.Write([]byte(`{}`))
					return
				}
				w.WriteHeader(503)
			}))
			t.Cleanup(c.Close)
			bc := httpclient.New(httpclient.WithPipeline(review94Pipe(3)))
			b := httptest.NewServer(retrysignal.Middleware(retrysignal.Handler(func(w http.ResponseWriter, r *http.Request) error {
				at, _ := retrysignal.FromContext(r.Context())
				var v any
				if at.Hedge {
					time.Sleep(150 * time.Millisecond) // the hedge: slow, but served
					if err := bc.GetJSON(r.Context(), c.URL+"?hedge=1", &v); err != nil {
						return err
					}
					_, _ = w.Write([]byte(`{}`))
					return nil
				}
				time.Sleep(60 * time.Millisecond) // past the hedging delay
				return bc.GetJSON(r.Context(), c.URL, &v)
			})))
			t.Cleanup(b.Close)
			opts := []httpclient.Option{httpclient.WithPipeline(review94Hedged(1, 20*time.Millisecond))}
			if !trust {
				opts = append(opts, review94NoTrust)
			}
			a := httpclient.New(opts...)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err := review94Get(ctx, a, b.URL)
			t.Logf("trust=%v err=%v C requests=%d", trust, err, cReqs.Load())
			// docs/retries.md: the first answer not to retry cancels the
			// hedge out, which without the signal wins.
			if trust != (err != nil) {
				t.Errorf("trust=%v: err %v, want a failure exactly when the signal is trusted (docs/retries.md)", trust, err)
			}
		})
	}
}
