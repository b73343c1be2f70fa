package httpclient_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/deadline"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/retrysignal"
)

func review94Pipe(attempts int, opts ...pipeline.Option) *pipeline.Pipeline {
	o := []pipeline.Option{pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(attempts), retrypolicy.BaseDelay(time.Millisecond), retrypolicy.MaxDelay(5*time.Millisecond)))}
	return pipeline.New(append(o, opts...)...)
}

func review94Hedged(attempts int, d time.Duration, opts ...pipeline.Option) *pipeline.Pipeline {
	return review94Pipe(attempts, append([]pipeline.Option{pipeline.WithHedging(hedge.New(hedge.Delay(d), hedge.MaxShare(1)))}, opts...)...)
}

// review94Hop is a toolkit hop that GETs next with c.
func review94Hop(t *testing.T, c *httpclient.Client, next func() string) *httptest.Server {
	s := httptest.NewServer(deadline.Middleware(retrysignal.Middleware(retrysignal.Handler(func(w http.ResponseWriter, r *http.Request) error {
		var v any
		if err := c.GetJSON(r.Context(), next(), &v); err != nil {
			return err
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"ok":true}`))
		return nil
	}))))
	t.Cleanup(s.Close)
	return s
}

var review94NoTrust = httpclient.TrustNoRetry(func(*url.URL) bool { return false })

func review94Count(n *atomic.Int64, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) { n.Add(1); h(w, r) }
}

func review94Get(ctx context.Context, c *httpclient.Client, u string) error {
	var v any
	return c.GetJSON(ctx, u, &v)
}
