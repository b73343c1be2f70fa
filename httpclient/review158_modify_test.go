package httpclient_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/deadline"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrysignal"
)

// A reverse proxy on httpclient's Transport whose ModifyResponse sends
// upstream failures to its ErrorHandler (a common way to give them the
// proxy's own error page), with retrysignal.ProxyErrorHandler: its
// Transport already made 3 attempts, so the caller above must not retry.
// The proxy hands ProxyErrorHandler ModifyResponse's error alone, which
// must say so (review158: unmarked, D got 9 requests): ProxyErrorHandler's
// doc gives the way.
func TestReview158_ProxyModifyResponseErrorKeepsOneLayer(t *testing.T) {
	var hits atomic.Int32
	d, dRT := review158Server(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
	}), false)
	u, _ := url.Parse(d.URL)
	p := httputil.NewSingleHostReverseProxy(u)
	p.Transport = httpclient.NewTransport(httpclient.WithPipeline(review158Pipe()), httpclient.Base(dRT))
	p.ModifyResponse = func(resp *http.Response) error { // as ProxyErrorHandler's doc says
		if resp.StatusCode >= 500 {
			err := fmt.Errorf("upstream answered %d", resp.StatusCode)
			if retrysignal.NoRetry(resp.Header) {
				err = resilience.Terminal(err)
			}
			return err
		}
		return nil
	}
	p.ErrorHandler = retrysignal.ProxyErrorHandler
	b, bRT := review158Server(t, deadline.Middleware(retrysignal.Middleware(p)), false)
	a := httpclient.New(httpclient.WithPipeline(review158Pipe()), httpclient.Base(bRT))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := a.GetJSON(ctx, b.URL, nil)
	var se *httpclient.StatusError
	if !errors.As(err, &se) {
		t.Fatalf("err %v", err)
	}
	if n := hits.Load(); n > 3 {
		t.Errorf("D got %d requests for one user request (one layer: 3); the proxy answered %d, No-Retry %q",
			n, se.StatusCode, se.Header.Get(retrysignal.NoRetryHeader))
	}
}
