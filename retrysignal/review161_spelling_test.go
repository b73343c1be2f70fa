package retrysignal_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrysignal"
)

// review161Keys returns the keys of h that equal name in any spelling.
func review161Keys(h http.Header, name string) []string {
	var ks []string
	for k := range h {
		if strings.EqualFold(k, name) {
			ks = append(ks, k)
		}
	}
	return ks
}

// WriteError "in any spelling: net/http sends a key of the map as it is":
// the headers WriteError itself sets (No-Retry, Cache-Control,
// Content-Type) must not go out beside a handler's own of another
// spelling, which would contradict them: a second Content-Type (the
// problem document said to be HTML), a second Cache-Control (a cache
// told it may keep it), a second No-Retry: 0.
func TestReview161_WriteError_OwnHeadersAnySpelling(t *testing.T) {
	for _, name := range []string{retrysignal.NoRetryHeader, "Cache-Control", "Content-Type"} {
		rec := httptest.NewRecorder()
		lower := strings.ToLower(name)
		rec.Header()[lower] = []string{"contradiction"}
		retrysignal.WriteError(rec, resilience.Terminal(errors.New("dep")))
		if ks := review161Keys(rec.Result().Header, name); len(ks) != 1 {
			t.Errorf("%s: sent under %d spellings %v: %v", name, len(ks), ks, rec.Result().Header)
		}
	}
}

// Over the wire: the client sees two values for the same header.
func TestReview161_WriteError_OwnHeadersAnySpelling_Wire(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header()["cache-control"] = []string{"public, max-age=3600"}
		w.Header()["content-type"] = []string{"text/html"}
		retrysignal.WriteError(w, resilience.Terminal(errors.New("dep")))
	}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if v := resp.Header.Values("Cache-Control"); len(v) != 1 || v[0] != "no-store" {
		t.Errorf("Cache-Control %q, want only no-store", v)
	}
	if v := resp.Header.Values("Content-Type"); len(v) != 1 || v[0] != "application/problem+json" {
		t.Errorf("Content-Type %q, want only application/problem+json", v)
	}
}

// The contradicting headers, in odd spellings, are gone.
func TestReview161_WriteError_ContradictingGone(t *testing.T) {
	rec := httptest.NewRecorder()
	for _, k := range []string{"content-length", "CONTENT-ENCODING", "content-Range", "retry-after", "etag", "ETAG", "last-modified", "expires"} {
		rec.Header()[k] = []string{"x"}
	}
	retrysignal.WriteError(rec, resilience.Terminal(errors.New("dep")))
	for _, k := range []string{"Content-Length", "Content-Encoding", "Content-Range", "Retry-After", "ETag", "Last-Modified", "Expires"} {
		if ks := review161Keys(rec.Header(), k); len(ks) != 0 {
			t.Errorf("%s left: %v", k, ks)
		}
	}
}

// Handler: a 101 then an error is not answered again (logged); a 103 then
// an error is answered.
func TestReview161_Handler_101And103(t *testing.T) {
	rec := httptest.NewRecorder()
	retrysignal.Handler(func(w http.ResponseWriter, r *http.Request) error {
		w.WriteHeader(http.StatusEarlyHints)
		return resilience.Terminal(errors.New("dep"))
	}).ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if !strings.Contains(rec.Body.String(), "do not retry") {
		t.Errorf("103 then error: not answered: %d %q", rec.Code, rec.Body.String())
	}
}
