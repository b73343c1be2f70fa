package idempotency_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/idempotency"
)

// TestStreamingHandlers: a handler may flush (as an http.Flusher or by a
// ResponseController) and may hijack; a flush before WriteHeader is a 200
// as net/http makes it, and a hijacked response is not replayed (nor run
// again).
func TestStreamingHandlers(t *testing.T) {
	var runs atomic.Int64
	h := idempotency.Middleware(nil, idempotency.SharedKeys())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		switch r.URL.Path {
		case "/flusher":
			f, ok := w.(http.Flusher)
			if !ok {
				http.Error(w, "no flusher", http.StatusInternalServerError)
				return
			}
			_, _ = io.WriteString(w, "part")
			f.Flush()
		case "/flush-first":
			_ = http.NewResponseController(w).Flush()
			w.WriteHeader(http.StatusCreated) // too late: the 200 went out
		case "/hijack":
			conn, rw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			_, _ = rw.WriteString("HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok")
			_ = rw.Flush()
			conn.Close()
		}
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	post := func(path string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader("{}"))
		req.Header.Set(idempotency.Header, "k"+path)
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, body := post("/flusher")
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "part", body)
	code, _ = post("/flush-first")
	replayed, _ := post("/flush-first")
	assert.Equal(t, code, replayed, "the replay has the status the client got")
	code, _ = post("/hijack")
	assert.Equal(t, http.StatusCreated, code)
	require.Eventually(t, func() bool { code, _ = post("/hijack"); return code != http.StatusConflict },
		time.Second, 5*time.Millisecond, "the first is stored as soon as its handler returns")
	assert.Equal(t, http.StatusInternalServerError, code, "not replayable, not run again")
	assert.EqualValues(t, 3, runs.Load(), "each path ran once")
}

// TestOuterHeadersOfTheFirstRequestAreNotStored.
func TestOuterHeadersOfTheFirstRequestAreNotStored(t *testing.T) {
	inner := idempotency.Middleware(nil, idempotency.SharedKeys())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	}))
	cors := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if o := r.Header.Get("Origin"); o == "https://a.example" {
			w.Header().Set("Access-Control-Allow-Origin", o)
		}
		inner.ServeHTTP(w, r)
	})
	post := func(origin string) http.Header {
		r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader("{}"))
		r.Header.Set(idempotency.Header, "k")
		r.Header.Set("Origin", origin)
		w := httptest.NewRecorder()
		cors.ServeHTTP(w, r)
		return w.Header()
	}
	post("https://a.example")
	h := post("https://evil.example")
	assert.Equal(t, "true", h.Get(idempotency.ReplayedHeader))
	assert.Empty(t, h.Get("Access-Control-Allow-Origin"), "the first request's CORS header is not replayed to another origin")
}

// TestHeadWithALargeBodyIsReplayed: net/http sends no body to a HEAD, so a
// handler that writes more than MaxResponse for one answered its client
// whole; the repeat gets the same answer, not 500 "not replayable", and
// the handler does not run again.
func TestHeadWithALargeBodyIsReplayed(t *testing.T) {
	var runs atomic.Int64
	h := idempotency.Middleware(nil, idempotency.SharedKeys(), idempotency.MaxResponse(16), idempotency.Methods(http.MethodHead))(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			w.Header().Set("X-Size", "100")
			_, _ = io.WriteString(w, strings.Repeat("a", 100))
		}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	var got []http.Header
	for i := range 2 {
		req, _ := http.NewRequest(http.MethodHead, srv.URL, nil)
		req.Header.Set(idempotency.Header, "k-head")
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode, "call %d", i+1)
		assert.Equal(t, "100", resp.Header.Get("X-Size"), "call %d", i+1)
		got = append(got, resp.Header)
	}
	assert.EqualValues(t, 1, runs.Load())
	// What net/http set from the body the first time, the replay says too.
	for _, k := range []string{"Content-Length", "Content-Type"} {
		assert.NotEmpty(t, got[0].Get(k), k)
		assert.Equal(t, got[0].Get(k), got[1].Get(k), k)
	}
}
