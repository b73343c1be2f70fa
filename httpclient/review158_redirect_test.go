package httpclient_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrysignal"
)

// A redirect that the Client's own policy refuses (CheckRedirect, or the
// default 10-redirect limit) is an error the client made itself after the
// exchange: no retry fixes it. It must not come back as a transient error,
// which a pipeline around the call retries and which retrysignal answers
// as 503 without the signal, so that the caller above retries it too.
func TestReview158_RefusedRedirectIsNotTransient(t *testing.T) {
	var hits atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer other.Close()
	d := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		http.Redirect(w, r, other.URL+"/elsewhere", http.StatusFound)
	}))
	defer d.Close()
	refused := errors.New("redirect to another host refused")
	c := httpclient.New(httpclient.WithPipeline(review158Pipe()), httpclient.CheckRedirect(func(req *http.Request, via []*http.Request) error {
		if req.URL.Host != via[0].URL.Host {
			return refused
		}
		return nil
	}))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := c.GetJSON(ctx, d.URL, nil)
	if !errors.Is(err, refused) {
		t.Fatalf("err %v", err)
	}
	if cl := resilience.Classify(err); cl.Retryable() {
		t.Errorf("a redirect the client's own policy refused is of class %v (retried by a pipeline around the call)", cl)
	}
	if s := retrysignal.Status(err); s == http.StatusServiceUnavailable {
		t.Errorf("retrysignal.Status answers a refused redirect with %d (Service Unavailable): the caller retries a failure no retry fixes", s)
	}

	// Through a chain: B (3 attempts) -> C (Client, default policy) -> D
	// (a redirect loop): each of C's calls sends 11 requests to D, and B
	// retries C's 503.
	hits.Store(0)
	loop := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		http.Redirect(w, r, r.URL.Path, http.StatusFound)
	}))
	defer loop.Close()
	cSrv, cRT := review158Hop(t, loop, http.DefaultTransport, false)
	b := httpclient.New(httpclient.WithPipeline(review158Pipe()), httpclient.Base(cRT))
	err = b.GetJSON(ctx, cSrv.URL, nil)
	t.Logf("D requests for one call through a hop that hits a redirect loop: %d; err %v", hits.Load(), err)
	if n := hits.Load(); n > 11 {
		t.Errorf("a redirect loop below C was retried by C's caller: %d requests reached D (one call of C's: 10)", n)
	}
}
