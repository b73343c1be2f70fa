package idempotency_test

import (
	"bufio"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/resiliencekit/resiliencekit/idempotency"
)

func r116Post(t *testing.T, url, key string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader("body"))
	req.Header.Set(idempotency.Header, key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil
	}
	_, _ = io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	return resp
}

// A handler that hijacks, answers on the connection, then panics or calls
// runtime.Goexit: its key is kept, a retry does not run it again.
func TestReview116HijackThenPanicOrGoexitKeepsTheKey(t *testing.T) {
	for _, how := range []string{"panic", "goexit", "abortHandler"} {
		t.Run(how, func(t *testing.T) {
			var runs atomic.Int64
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				runs.Add(1)
				conn, rw, err := http.NewResponseController(w).Hijack()
				if err != nil {
					t.Error(err)
					return
				}
				_, _ = rw.WriteString("HTTP/1.1 201 Created\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
				_ = rw.Flush()
				_ = conn.Close()
				switch how {
				case "panic":
					panic("after the hijack")
				case "goexit":
					runtime.Goexit()
				default:
					panic(http.ErrAbortHandler)
				}
			})
			srv := httptest.NewServer(idempotency.Middleware(idempotency.NewMemoryStore(0), idempotency.SharedKeys())(h))
			srv.Config.ErrorLog = nil
			defer srv.Close()
			r116Post(t, srv.URL, "k1")
			resp := r116Post(t, srv.URL, "k1")
			if runs.Load() != 1 {
				t.Errorf("%s after a hijack: ran %d times", how, runs.Load())
			}
			if resp != nil && resp.StatusCode != http.StatusInternalServerError && resp.StatusCode != http.StatusConflict {
				t.Errorf("retry got %d, want 500 not replayable", resp.StatusCode)
			}
		})
	}
}

// Excluded headers whatever their case, and trailers declared by
// http.TrailerPrefix in the header map before the status: neither stored
// nor replayed ("Trailers are not stored", docs/idempotency.md).
func TestReview116HeaderCaseAndPrefixedTrailers(t *testing.T) {
	var runs atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.Header()["set-cookie"] = []string{"session=alice"}
		w.Header()["SET-COOKIE"] = []string{"session2=alice"}
		w.Header()[http.TrailerPrefix+"X-Secret"] = []string{"alice-secret"}
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(strings.Repeat("x", 5000)))
	})
	srv := httptest.NewServer(idempotency.Middleware(idempotency.NewMemoryStore(0), idempotency.SharedKeys())(h))
	defer srv.Close()
	first := r116Post(t, srv.URL, "k1")
	resp := r116Post(t, srv.URL, "k1")
	if resp == nil || resp.Header.Get(idempotency.ReplayedHeader) != "true" {
		t.Fatalf("no replay: %v", resp)
	}
	t.Logf("first trailers %v; replay header %v trailers %v", first.Trailer, resp.Header, resp.Trailer)
	if len(resp.Header.Values("Set-Cookie")) != 0 {
		t.Errorf("Set-Cookie replayed: %v", resp.Header.Values("Set-Cookie"))
	}
	if resp.Trailer.Get("X-Secret") != "" {
		t.Errorf("a trailer replayed: %v", resp.Trailer)
	}
	_ = bufio.NewReader
}
