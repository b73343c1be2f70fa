package httpclient_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/idempotency"
)

func r56Srv(t *testing.T, seen *atomic.Value) *httptest.Server {
	inner := idempotency.Middleware(idempotency.NewMemoryStore(0), idempotency.SharedKeys(), idempotency.WithLogger(slog.New(slog.DiscardHandler)))(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(201) }))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Store(strings.Join(r.Header.Values("Idempotency-Key"), " | "))
		inner.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// A caller's key set under a non-canonical header name, plus AutoIdempotencyKey.
func TestReview56AutoKeyWithNonCanonicalUserKey(t *testing.T) {
	for _, name := range []string{"Idempotency-Key", "idempotency-key", "IDEMPOTENCY-KEY"} {
		var seen atomic.Value
		srv := r56Srv(t, &seen)
		// A plain client.
		req, _ := http.NewRequest("POST", srv.URL, strings.NewReader("x"))
		req.Header[name] = []string{"user-key-1"}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		plain := resp.StatusCode
		// The toolkit's.
		c := &http.Client{Transport: httpclient.NewTransport(httpclient.AutoIdempotencyKey())}
		req, _ = http.NewRequest("POST", srv.URL, strings.NewReader("x"))
		req.Header[name] = []string{"user-key-2"}
		resp, err = c.Do(req)
		if err != nil {
			t.Errorf("%s: toolkit: %v (plain got %d); server saw %v", name, err, plain, seen.Load())
			continue
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != plain {
			t.Errorf("%s: plain client got %d, toolkit client got %d; server saw keys %v", name, plain, resp.StatusCode, seen.Load())
		}
	}
}

// A POST whose key is set under a non-canonical name: is it retried as one with a key?
func TestReview56NonCanonicalKeyRetried(t *testing.T) {
	for _, name := range []string{"Idempotency-Key", "idempotency-key"} {
		var n atomic.Int64
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if n.Add(1) == 1 {
				w.WriteHeader(503)
				return
			}
			w.WriteHeader(201)
		}))
		c := &http.Client{Transport: httpclient.NewTransport()}
		req, _ := http.NewRequest("POST", srv.URL, strings.NewReader("x"))
		req.Header[name] = []string{"k1"}
		resp, err := c.Do(req)
		code := 0
		if err == nil {
			code = resp.StatusCode
			resp.Body.Close()
		}
		srv.Close()
		if code != 201 {
			t.Errorf("%s: attempts %d, status %d, err %v", name, n.Load(), code, err)
		}
	}
}
