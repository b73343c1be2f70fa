package retrysignal_test

// review162: 101 over HTTP/2, and WriteError's headers in any spelling.

import (
	"crypto/tls"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/resiliencekit/resiliencekit/retrysignal"
)

// r162Writer records what reaches the ResponseWriter.
type r162Writer struct {
	h       http.Header
	codes   []int
	body    strings.Builder
	started bool
}

func (w *r162Writer) Header() http.Header {
	if w.h == nil {
		w.h = http.Header{}
	}
	return w.h
}
func (w *r162Writer) WriteHeader(code int) { w.codes = append(w.codes, code) }
func (w *r162Writer) Write(p []byte) (int, error) {
	return w.body.Write(p)
}

var r162Err = errors.New("review162: dependency 503")

func TestReview162SwitchingProtocolsByProto(t *testing.T) {
	for _, tc := range []struct {
		major, minor int
		answered     bool // the error is answered after the 101
	}{
		{1, 1, false}, {1, 0, false}, {2, 0, true}, {3, 0, true},
	} {
		w := &r162Writer{}
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.ProtoMajor, r.ProtoMinor = tc.major, tc.minor
		retrysignal.Handler(func(w http.ResponseWriter, r *http.Request) error {
			w.WriteHeader(http.StatusSwitchingProtocols)
			return r162Err
		}).ServeHTTP(w, r)
		got := len(w.codes) > 1
		if got != tc.answered {
			t.Errorf("HTTP/%d.%d: after a 101, error answered = %v, want %v (codes %v)", tc.major, tc.minor, got, tc.answered, w.codes)
		}
		if tc.answered && (w.codes[len(w.codes)-1] < 400 || !strings.Contains(w.body.String(), "status")) {
			t.Errorf("HTTP/%d: answer %v %q", tc.major, w.codes, w.body.String())
		}
	}
	// 103 then an error: answered, over both.
	for _, major := range []int{1, 2} {
		w := &r162Writer{}
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.ProtoMajor = major
		retrysignal.Handler(func(w http.ResponseWriter, r *http.Request) error {
			w.WriteHeader(http.StatusEarlyHints)
			return r162Err
		}).ServeHTTP(w, r)
		if len(w.codes) != 2 {
			t.Errorf("HTTP/%d: 103 then error: codes %v", major, w.codes)
		}
	}
}

// Over a real HTTP/2 server: a 101 is informational, and the error is
// answered.
func TestReview162SwitchingProtocolsRealH2(t *testing.T) {
	srv := httptest.NewUnstartedServer(retrysignal.Handler(func(w http.ResponseWriter, r *http.Request) error {
		w.WriteHeader(http.StatusSwitchingProtocols)
		return r162Err
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	c := srv.Client()
	c.Transport.(*http.Transport).TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // test server
	c.Transport.(*http.Transport).ForceAttemptHTTP2 = true
	resp, err := c.Get(srv.URL)
	if err != nil {
		t.Logf("h2 client error (a 101 over h2): %v", err)
		return
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.ProtoMajor != 2 {
		t.Skipf("not h2: %s", resp.Proto)
	}
	if resp.StatusCode < 400 {
		t.Errorf("over h2, a handler's error after a 101 got %d %q", resp.StatusCode, b)
	}
}

// WriteError replaces the headers it sets and drops contradicting ones,
// whatever their spelling in the map, so that the answer has one of each.
func TestReview162WriteErrorSpellings(t *testing.T) {
	spellings := func(k string) []string {
		return []string{strings.ToLower(k), strings.ToUpper(k), k, strings.ReplaceAll(strings.ToLower(k), "-", "-")}
	}
	w := &r162Writer{}
	h := w.Header()
	for _, k := range []string{"Content-Type", "Cache-Control", "No-Retry", "Content-Length", "Content-Encoding", "Content-Range",
		"Retry-After", "ETag", "Last-Modified", "Expires"} {
		for i, s := range spellings(k) {
			h[s] = []string{"handler-" + string(rune('a'+i))}
		}
	}
	h["Etag"] = []string{"\"x\""}
	h["X-Kept"] = []string{"yes"}
	retrysignal.WriteError(w, r162Err)
	for k, v := range h {
		for _, c := range []string{"Content-Length", "Content-Encoding", "Content-Range", "Retry-After", "ETag", "Last-Modified", "Expires"} {
			if strings.EqualFold(k, c) {
				t.Errorf("contradicting %q: %v kept", k, v)
			}
		}
		for _, c := range []string{"Content-Type", "Cache-Control", "No-Retry"} {
			if strings.EqualFold(k, c) && (k != c || len(v) != 1 || strings.HasPrefix(v[0], "handler-")) {
				t.Errorf("%q: %v, want WriteError's alone", k, v)
			}
		}
	}
	if h.Get("X-Kept") != "yes" {
		t.Error("an unrelated header dropped")
	}
	if h.Get("Content-Type") != "application/problem+json" || h.Get("Cache-Control") != "no-store" {
		t.Errorf("headers %v", h)
	}
	if len(w.codes) != 1 || w.codes[0] != retrysignal.Status(r162Err) {
		t.Errorf("codes %v", w.codes)
	}

	// Over the wire (HTTP/1): the client sees one Content-Type and one
	// Cache-Control, and no No-Retry for an error nobody retried.
	srv := httptest.NewServer(retrysignal.Handler(func(w http.ResponseWriter, r *http.Request) error {
		w.Header()["content-type"] = []string{"text/html"}
		w.Header()["cache-control"] = []string{"public, max-age=3600"}
		w.Header()["no-retry"] = []string{"1"}
		w.Header()["NO-RETRY"] = []string{"1"}
		return errors.New("review162: plain client error")
	}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if v := resp.Header.Values("Content-Type"); len(v) != 1 || v[0] != "application/problem+json" {
		t.Errorf("Content-Type %v", v)
	}
	if v := resp.Header.Values("Cache-Control"); len(v) != 1 || v[0] != "no-store" {
		t.Errorf("Cache-Control %v", v)
	}
	if v := resp.Header.Values("No-Retry"); len(v) != 0 {
		t.Errorf("No-Retry %v for an error nobody retried", v)
	}
}
