package httpclient_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/deadline"
	"github.com/resiliencekit/resiliencekit/httpclient"
)

// deadline.Inject "removes any Header from h when ctx has none, so a stale
// value is never forwarded", and the Transport sends "the time left in its
// budget". A header copied in with a non-canonical key (as from gRPC
// metadata, lowercase, or a map literal) escapes both: without a deadline
// the stale value reaches the server, whose Middleware cuts the handler
// short; with one, the server gets two values and ignores both.
func TestReview21NonCanonicalStaleDeadlineHeader(t *testing.T) {
	var mu sync.Mutex
	var got []string
	var hadDeadline bool
	var left time.Duration
	srv := httptest.NewServer(deadline.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, ok := r.Context().Deadline()
		mu.Lock()
		got, hadDeadline, left = r.Header.Values(deadline.Header), ok, time.Until(d)
		mu.Unlock()
		select {
		case <-r.Context().Done():
			http.Error(w, "out of time", http.StatusGatewayTimeout)
		case <-time.After(20 * time.Millisecond):
			w.WriteHeader(http.StatusOK)
		}
	})))
	defer srv.Close()
	hc := &http.Client{Transport: httpclient.NewTransport()}

	// No deadline: the stale "1" must not be forwarded.
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, srv.URL, nil)
	req.Header["request-timeout-ms"] = []string{"1"}
	resp, err := hc.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	mu.Lock()
	t.Logf("no deadline: server saw %q, deadline %v, status %d", got, hadDeadline, resp.StatusCode)
	assert.False(t, hadDeadline, "the caller has no deadline: a stale value must not be forwarded")
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	mu.Unlock()

	// A deadline of 5 s: the server must get it.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ = http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	req.Header["request-timeout-ms"] = []string{"1"}
	resp, err = hc.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	mu.Lock()
	t.Logf("5 s deadline: server saw %q, deadline %v (%v left)", got, hadDeadline, left)
	assert.True(t, hadDeadline, "the caller's budget must reach the server")
	mu.Unlock()
}
