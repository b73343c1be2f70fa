package retrysignal_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/resiliencekit/resiliencekit/retrysignal"
)

// A handler that copied a dependency's answer headers (a plain client's
// 503, which carried the dependency's own No-Retry) and then returned the
// error: Handler answers "without the signal" (the error does not say the
// layer below retried), so the caller must be free to retry.
func TestReview125_HandlerWithoutSignalKeepsCopiedNoRetry(t *testing.T) {
	h := retrysignal.Handler(func(w http.ResponseWriter, r *http.Request) error {
		dep := http.Header{}
		dep.Set("No-Retry", "1") // from the dependency's 503, copied as a passthrough handler does
		dep.Set("X-Upstream", "c")
		for k, v := range dep {
			w.Header()[k] = v
		}
		return errors.New("plain client: 503 from dependency")
	})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("status %d", rec.Code)
	}
	if retrysignal.NoRetry(rec.Header()) {
		t.Fatalf("Handler answered a non-retried error (Retried=false) with No-Retry: 1 left from the handler's header: the caller will not retry what nobody below retried")
	}
}

// The same through ProxyErrorHandler / WriteError is not at issue
// (WriteError always signals); this checks the doc's "in the same way
// but without the signal" for ProxyErrorHandler.
func TestReview125_ProxyErrorHandlerWithoutSignalKeepsNoRetry(t *testing.T) {
	rec := httptest.NewRecorder()
	rec.Header().Set("No-Retry", "1")
	retrysignal.ProxyErrorHandler(rec, httptest.NewRequest("GET", "/", nil), errors.New("dial tcp: connection refused"))
	if retrysignal.NoRetry(rec.Header()) {
		t.Fatalf("ProxyErrorHandler answered an unretried error with a No-Retry header already on the writer")
	}
}

// A legacy handler asserts http.CloseNotifier, which net/http's writer
// implements: under Handler it panics where it ran without it.
func TestReview125_HandlerHidesCloseNotifier(t *testing.T) {
	srv := httptest.NewServer(retrysignal.Handler(func(w http.ResponseWriter, r *http.Request) error {
		_, ok := w.(http.CloseNotifier) //nolint:staticcheck
		if !ok {
			w.WriteHeader(599)
			return nil
		}
		w.WriteHeader(200)
		return nil
	}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("handler's writer under Handler is not an http.CloseNotifier, where net/http's is (status %d)", resp.StatusCode)
	}
}

// io.ReaderFrom: net/http's writer has it (sendfile for files); under
// Handler it is gone. Performance only: io.Copy falls back to Write.
func TestReview125_HandlerHidesReaderFrom(t *testing.T) {
	var plain, wrapped bool
	probe := func(ok *bool) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, *ok = w.(io.ReaderFrom) })
	}
	for _, c := range []struct {
		h  http.Handler
		ok *bool
	}{{probe(&plain), &plain}, {retrysignal.Handler(func(w http.ResponseWriter, r *http.Request) error {
		probe(&wrapped).ServeHTTP(w, r)
		return nil
	}), &wrapped}} {
		srv := httptest.NewServer(c.h)
		resp, err := http.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		srv.Close()
	}
	if plain && !wrapped {
		t.Fatalf("net/http's writer is an io.ReaderFrom, Handler's is not")
	}
}
