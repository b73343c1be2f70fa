package idempotency_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/idempotency"
)

// TestOptionsTakeTheirLeastValue: each bounded option takes its least
// value and panics, naming itself, for the one below it.
func TestOptionsTakeTheirLeastValue(t *testing.T) {
	for _, tc := range []struct {
		name   string
		least  func() idempotency.Option
		below  func() idempotency.Option
		panics string
	}{
		{"TTL", func() idempotency.Option { return idempotency.TTL(time.Nanosecond) }, func() idempotency.Option { return idempotency.TTL(0) },
			"idempotency: TTL(0s): d must be more than 0"},
		{"Lease", func() idempotency.Option { return idempotency.Lease(time.Nanosecond) }, func() idempotency.Option { return idempotency.Lease(0) },
			"idempotency: Lease(0s): d must be more than 0"},
		{"StoreTimeout", func() idempotency.Option { return idempotency.StoreTimeout(time.Nanosecond) }, func() idempotency.Option { return idempotency.StoreTimeout(0) },
			"idempotency: StoreTimeout(0s): d must be more than 0"},
		{"MaxResponse", func() idempotency.Option { return idempotency.MaxResponse(1) }, func() idempotency.Option { return idempotency.MaxResponse(0) },
			"idempotency: MaxResponse(0): n must be 1 or more"},
		{"MaxBody", func() idempotency.Option { return idempotency.MaxBody(1) }, func() idempotency.Option { return idempotency.MaxBody(0) },
			"idempotency: MaxBody(0): n must be 1 or more"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.NotPanics(t, func() { tc.least() })
			assert.PanicsWithValue(t, tc.panics, func() { tc.below() })
		})
	}
}

// counted is fn behind the middleware, its runs counted in runs.
func counted(runs *atomic.Int64, fn http.HandlerFunc) http.Handler {
	return idempotency.Middleware(nil, idempotency.SharedKeys())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		fn(w, r)
	}))
}

// sizedServer answers each request with a body of the length its query
// n says, behind the middleware with opts, and counts its runs.
func sizedServer(runs *atomic.Int64, opts ...idempotency.Option) http.Handler {
	return idempotency.Middleware(nil, append([]idempotency.Option{idempotency.SharedKeys()}, opts...)...)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		_, _ = io.WriteString(w, strings.Repeat("x", n))
	}))
}

func postTo(h http.Handler, target, key, body string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, target, strings.NewReader(body))
	r.Header.Set(idempotency.Header, key)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// TestBodyAndResponseBoundsAreExact: a request body of exactly MaxBody is
// protected and one a byte longer refused with 413, unrun; a response of
// exactly MaxResponse is replayed, and one a byte longer is sent whole but
// not replayable, and not run again.
func TestBodyAndResponseBoundsAreExact(t *testing.T) {
	for _, max := range []int{1, 10} {
		t.Run(fmt.Sprint("MaxBody ", max), func(t *testing.T) {
			var runs atomic.Int64
			h := sizedServer(&runs, idempotency.MaxBody(int64(max)))
			assert.Equal(t, http.StatusOK, postTo(h, "/", "fits", strings.Repeat("b", max)).Code)
			replay := postTo(h, "/", "fits", strings.Repeat("b", max))
			assert.Equal(t, "true", replay.Header().Get(idempotency.ReplayedHeader))
			w := postTo(h, "/", "over", strings.Repeat("b", max+1))
			assert.Equal(t, http.StatusRequestEntityTooLarge, w.Code)
			assert.EqualValues(t, 1, runs.Load())
		})
		t.Run(fmt.Sprint("MaxResponse ", max), func(t *testing.T) {
			var runs atomic.Int64
			h := sizedServer(&runs, idempotency.MaxResponse(max))
			target := fmt.Sprint("/?n=", max)
			assert.Equal(t, max, postTo(h, target, "fits", "{}").Body.Len())
			replay := postTo(h, target, "fits", "{}")
			assert.Equal(t, "true", replay.Header().Get(idempotency.ReplayedHeader))
			assert.Equal(t, strings.Repeat("x", max), replay.Body.String())

			target = fmt.Sprint("/?n=", max+1)
			assert.Equal(t, max+1, postTo(h, target, "over", "{}").Body.Len(), "sent whole")
			w := postTo(h, target, "over", "{}")
			assert.Equal(t, http.StatusInternalServerError, w.Code)
			assert.Contains(t, w.Body.String(), "response not replayable")
			assert.EqualValues(t, 2, runs.Load(), "each run once")
		})
	}
}

// postOver posts to srv, over the network, with key, and returns the
// answer's status, body and header.
func postOver(t *testing.T, srv *httptest.Server, key string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("{}"))
	require.NoError(t, err)
	req.Header.Set(idempotency.Header, key)
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body), resp.Header
}

// TestWholeAnswersAreReplayed: an answer that reached its client whole is
// stored as the client got it and replayed, not refused as incomplete nor
// run again: one with nothing written (a 200, as net/http makes it), one
// flushed mid-answer, one after a 103 Early Hints (informational, sent as
// it comes: the final answer is stored), one of exactly its declared
// Content-Length.
func TestWholeAnswersAreReplayed(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer http.HandlerFunc
		status int
		body   string
	}{
		{"nothing written", func(http.ResponseWriter, *http.Request) {}, http.StatusOK, ""},
		{"flushed mid-answer", func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, "part 1\n")
			if err := http.NewResponseController(w).Flush(); err != nil {
				panic(err)
			}
			_, _ = io.WriteString(w, "part 2\n")
		}, http.StatusCreated, "part 1\npart 2\n"},
		{"after early hints", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Link", "</style.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, "order 1")
		}, http.StatusCreated, "order 1"},
		{"exactly its Content-Length", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "7")
			_, _ = io.WriteString(w, "order 1")
		}, http.StatusOK, "order 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var runs atomic.Int64
			srv := httptest.NewServer(counted(&runs, tc.answer))
			defer srv.Close()
			for i, replayed := range []string{"", "true"} {
				status, body, header := postOver(t, srv, "k")
				assert.Equal(t, tc.status, status, "request %d", i)
				assert.Equal(t, tc.body, body, "request %d", i)
				assert.Equal(t, replayed, header.Get(idempotency.ReplayedHeader), "request %d", i)
			}
			assert.EqualValues(t, 1, runs.Load())
		})
	}
}

// TestHeadersSetAfterTheAnswerBeganAreNotStored: headers that a handler
// sets after its first write never reached its client (they had gone out
// with the body's start), so the replay has the headers the client got.
func TestHeadersSetAfterTheAnswerBeganAreNotStored(t *testing.T) {
	h := idempotency.Middleware(nil, idempotency.SharedKeys())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Early", "1")
		_, _ = io.WriteString(w, "order 1")
		w.Header().Set("X-Late", "1") // too late: not sent
	}))
	first := postTo(h, "/", "k", "{}")
	assert.Empty(t, first.Result().Header.Get("X-Late"), "the client did not get it")
	replay := postTo(h, "/", "k", "{}")
	assert.Equal(t, "true", replay.Header().Get(idempotency.ReplayedHeader))
	assert.Equal(t, "1", replay.Header().Get("X-Early"))
	assert.Empty(t, replay.Header().Get("X-Late"), "nor does a repeat")
}

// discardWriter is a ResponseWriter that keeps nothing of the body.
type discardWriter struct {
	header  http.Header
	status  int
	written int
}

func (w *discardWriter) Header() http.Header         { return w.header }
func (w *discardWriter) WriteHeader(status int)      { w.status = status }
func (w *discardWriter) Write(p []byte) (int, error) { w.written += len(p); return len(p), nil }

// TestAnAnswerOverMaxResponseIsNotHeldInMemory: an answer larger than
// MaxResponse is streamed to its client, not kept: 64 MiB written in two
// writes through a guard keeping at most 1 KiB hold no more than a few
// MiB of heap while the handler runs.
func TestAnAnswerOverMaxResponseIsNotHeldInMemory(t *testing.T) {
	chunk := make([]byte, 32<<20)
	var before, during runtime.MemStats
	h := idempotency.Middleware(nil, idempotency.SharedKeys(), idempotency.MaxResponse(1<<10))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for range 2 {
			_, _ = w.Write(chunk)
		}
		runtime.GC()
		runtime.ReadMemStats(&during)
	}))
	runtime.GC()
	runtime.ReadMemStats(&before)
	r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader("{}"))
	r.Header.Set(idempotency.Header, "k")
	w := &discardWriter{header: http.Header{}}
	h.ServeHTTP(w, r)
	assert.Equal(t, 64<<20, w.written, "sent whole")
	assert.Less(t, during.HeapAlloc, before.HeapAlloc+8<<20, "not held: %d MiB more", (int64(during.HeapAlloc)-int64(before.HeapAlloc))>>20)
	assert.Equal(t, http.StatusInternalServerError, postTo(h, "/", "k", "{}").Code, "not replayable, not run again")
}
