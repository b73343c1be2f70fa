package retrysignal_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/retrysignal"
)

// r126ResetBody fails at its first read: a dependency's body whose
// connection was reset before a byte came.
type r126ResetBody struct{}

func (r126ResetBody) Read([]byte) (int, error) { return 0, errors.New("connection reset by peer") }

// A handler that relays its dependency's body with io.Copy, the body
// failing before a byte was read: nothing was written, the response has
// not started, so Handler must answer the error (a 5xx), as it did before
// the writer had ReadFrom, and as net/http's own ReadFrom leaves the
// response unstarted.
func TestReview126_ReadFromNothingWrittenStillAnswered(t *testing.T) {
	h := retrysignal.Handler(func(w http.ResponseWriter, r *http.Request) error {
		w.Header().Set("Content-Type", "text/plain")
		_, err := io.Copy(w, r126ResetBody{})
		return err
	})
	t.Run("server", func(t *testing.T) {
		srv := httptest.NewServer(h)
		defer srv.Close()
		resp, err := http.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode < 500 {
			t.Fatalf("status %d body %q: a failed call answered as a success", resp.StatusCode, body)
		}
	})
	t.Run("http2", func(t *testing.T) {
		srv := httptest.NewUnstartedServer(h)
		srv.EnableHTTP2 = true
		srv.StartTLS()
		defer srv.Close()
		resp, err := srv.Client().Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.ProtoMajor != 2 {
			t.Fatalf("proto %s", resp.Proto)
		}
		if resp.StatusCode < 500 {
			t.Fatalf("status %d body %q: a failed call answered as a success", resp.StatusCode, body)
		}
	})
	t.Run("recorder", func(t *testing.T) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		if rec.Code < 500 {
			t.Fatalf("status %d body %q", rec.Code, rec.Body.String())
		}
	})
}

// An empty body relayed, then an error (a checksum or trailer the handler
// checks after the copy): nothing written, the error must be answered.
func TestReview126_EmptyCopyThenError(t *testing.T) {
	h := retrysignal.Handler(func(w http.ResponseWriter, r *http.Request) error {
		if _, err := io.Copy(w, io.LimitReader(strings.NewReader("x"), 0)); err != nil {
			return err
		}
		return errors.New("dependency's trailer said the body was truncated")
	})
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode < 500 {
		t.Fatalf("status %d: the error was not answered", resp.StatusCode)
	}
}

// http.ServeContent under Handler, Range, HEAD, HTTP/1.1 and HTTP/2: the
// same answers as without Handler.
func TestReview126_ServeContentSame(t *testing.T) {
	content := strings.Repeat("0123456789", 10000)
	plain := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.ServeContent(w, r, "f.txt", time.Time{}, strings.NewReader(content))
	})
	wrapped := retrysignal.Handler(func(w http.ResponseWriter, r *http.Request) error {
		http.ServeContent(w, r, "f.txt", time.Time{}, io.NewSectionReader(strings.NewReader(content), 0, int64(len(content))))
		return nil
	})
	for _, h2 := range []bool{false, true} {
		get := func(h http.Handler, method, rng string) (int, string, string) {
			srv := httptest.NewUnstartedServer(h)
			srv.EnableHTTP2 = h2
			srv.StartTLS()
			defer srv.Close()
			req, _ := http.NewRequest(method, srv.URL, nil)
			if rng != "" {
				req.Header.Set("Range", rng)
			}
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return resp.StatusCode, resp.Header.Get("Content-Length") + "|" + resp.Header.Get("Content-Range"), string(b)
		}
		for _, m := range []string{"GET", "HEAD"} {
			for _, rng := range []string{"", "bytes=10-20000", "bytes=0-1,5-9", "bytes=999999-"} {
				s1, h1, b1 := get(plain, m, rng)
				s2, hh2, b2 := get(wrapped, m, rng)
				if s1 != s2 || h1 != hh2 || (b1 != b2 && !strings.HasPrefix(rng, "bytes=0-1,")) || len(b1) != len(b2) {
					t.Errorf("h2=%v %s %q: plain %d %s %d bytes, wrapped %d %s %d bytes", h2, m, rng, s1, h1, len(b1), s2, hh2, len(b2))
				}
			}
		}
	}
}
