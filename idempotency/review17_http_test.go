package idempotency_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/resiliencekit/resiliencekit/idempotency"
)

var r17quiet = idempotency.WithLogger(slog.New(slog.DiscardHandler))

func r17srv(t *testing.T, store idempotency.Store, h http.HandlerFunc, opts ...idempotency.Option) *httptest.Server {
	opts = append([]idempotency.Option{idempotency.SharedKeys(), r17quiet}, opts...)
	srv := httptest.NewServer(idempotency.Middleware(store, opts...)(h))
	t.Cleanup(srv.Close)
	return srv
}

func r17post(t *testing.T, url, key, body string) (*http.Response, string) {
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if key != "" {
		req.Header.Set(idempotency.Header, key)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// A handler that writes a body with 204 (net/http drops it, the client
// gets a perfectly good 204): a retry should get 204 replayed.
func TestR17NoContentWithBodyIsReplayed(t *testing.T) {
	var runs atomic.Int64
	srv := r17srv(t, idempotency.NewMemoryStore(0), func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.WriteHeader(http.StatusNoContent)
		_, _ = io.WriteString(w, `{"ok":true}`)
	})
	resp, _ := r17post(t, srv.URL, "k1", "{}")
	require.Equal(t, 204, resp.StatusCode)
	resp, body := r17post(t, srv.URL, "k1", "{}")
	assert.Equal(t, 204, resp.StatusCode, "retry: %s", body)
	assert.EqualValues(t, 1, runs.Load())
}

// 103 Early Hints, then 201: the client gets 201; the replay 201.
func TestR17EarlyHints(t *testing.T) {
	var runs atomic.Int64
	srv := r17srv(t, idempotency.NewMemoryStore(0), func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.Header().Set("Link", "</a.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.WriteHeader(201)
		_, _ = io.WriteString(w, "ok")
	})
	resp, body := r17post(t, srv.URL, "k", "{}")
	assert.Equal(t, 201, resp.StatusCode)
	assert.Equal(t, "ok", body)
	resp, body = r17post(t, srv.URL, "k", "{}")
	assert.Equal(t, 201, resp.StatusCode)
	assert.Equal(t, "ok", body)
	assert.EqualValues(t, 1, runs.Load())
}

// Streams and flushes, writes nothing, hijacks: the first request as a
// plain server answers it.
func TestR17DoNoHarm(t *testing.T) {
	store := idempotency.NewMemoryStore(0)
	mux := http.NewServeMux()
	mux.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
		for i := range 5 {
			fmt.Fprintf(w, "part %d\n", i)
			w.(http.Flusher).Flush()
		}
	})
	mux.HandleFunc("/nothing", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("/rc", func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		require.NoError(t, rc.SetWriteDeadline(time.Now().Add(5*time.Second)))
		w.WriteHeader(202)
		require.NoError(t, rc.Flush())
		_, _ = io.WriteString(w, "x")
	})
	mux.HandleFunc("/hijack", func(w http.ResponseWriter, r *http.Request) {
		conn, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		defer conn.Close()
		_, _ = rw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi")
		_ = rw.Flush()
	})
	srv := r17srv(t, store, mux.ServeHTTP)
	resp, body := r17post(t, srv.URL+"/stream", "s", "{}")
	assert.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, 5, strings.Count(body, "part"))
	resp, body = r17post(t, srv.URL+"/stream", "s", "{}")
	assert.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, 5, strings.Count(body, "part"))
	resp, _ = r17post(t, srv.URL+"/nothing", "n", "{}")
	assert.Equal(t, 200, resp.StatusCode)
	resp, _ = r17post(t, srv.URL+"/nothing", "n", "{}")
	assert.Equal(t, 200, resp.StatusCode)
	resp, body = r17post(t, srv.URL+"/rc", "r", "{}")
	assert.Equal(t, 202, resp.StatusCode)
	assert.Equal(t, "x", body)
	resp, body = r17post(t, srv.URL+"/hijack", "h", "{}")
	assert.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, "hi", body)
	// GET and HEAD without a key untouched
	for _, m := range []string{http.MethodGet, http.MethodHead} {
		req, _ := http.NewRequest(m, srv.URL+"/stream", nil)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, 200, resp.StatusCode)
	}
}

// Many goroutines, one key, a handler three times slower than the lease.
func TestR17ConcurrentRepeatsSlowHandler(t *testing.T) {
	var runs atomic.Int64
	srv := r17srv(t, idempotency.NewMemoryStore(0), func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		time.Sleep(900 * time.Millisecond)
		w.WriteHeader(201)
		_, _ = io.WriteString(w, "order")
	}, idempotency.Lease(300*time.Millisecond), idempotency.StoreTimeout(50*time.Millisecond))
	var wg sync.WaitGroup
	var mu sync.Mutex
	seen := map[int]int{}
	deadline := time.Now().Add(1500 * time.Millisecond)
	for range 50 {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				resp, _ := r17post(t, srv.URL, "k", "{}")
				mu.Lock()
				seen[resp.StatusCode]++
				mu.Unlock()
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	t.Logf("codes %v", seen)
	assert.EqualValues(t, 1, runs.Load())
	for c := range seen {
		assert.Contains(t, []int{201, 409}, c)
	}
}

// Panic and Goexit before and after the status, and a client gone
// mid-handler: no goroutine left.
func TestR17NoLeaks(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	store := idempotency.NewMemoryStore(0)
	var runs atomic.Int64
	block := make(chan struct{})
	h := idempotency.Middleware(store, idempotency.SharedKeys(), r17quiet, idempotency.Lease(150*time.Millisecond), idempotency.StoreTimeout(50*time.Millisecond))(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			time.Sleep(200 * time.Millisecond) // a renewal or so
			claim := idempotency.FromContext(r.Context())
			ctx, cancel := claim.WithLeaseDeadline(r.Context())
			_ = ctx
			_ = cancel // not called: the request context ends it
			switch r.URL.Path {
			case "/panic":
				panic("boom")
			case "/panic-after":
				w.WriteHeader(201)
				panic("boom")
			case "/goexit":
				runtime.Goexit()
			case "/goexit-after":
				w.WriteHeader(201)
				runtime.Goexit()
			case "/abort":
				panic(http.ErrAbortHandler)
			case "/block":
				<-block
			}
		}))
	for _, p := range []string{"/panic", "/panic-after", "/goexit", "/goexit-after", "/abort"} {
		req := httptest.NewRequest(http.MethodPost, p, strings.NewReader("{}"))
		req.Header.Set(idempotency.Header, "k"+p)
		w := httptest.NewRecorder()
		done := make(chan struct{})
		go func() {
			defer close(done)
			defer func() { _ = recover() }()
			h.ServeHTTP(w, req)
		}()
		<-done
	}
	// client gone mid-handler
	ctx, cancel := context.WithCancel(context.Background())
	req := httptest.NewRequest(http.MethodPost, "/block", strings.NewReader("{}")).WithContext(ctx)
	req.Header.Set(idempotency.Header, "kb")
	done := make(chan struct{})
	go func() { defer close(done); h.ServeHTTP(httptest.NewRecorder(), req) }()
	time.Sleep(300 * time.Millisecond)
	cancel()
	close(block)
	<-done
	time.Sleep(50 * time.Millisecond)
	// after each, what is stored?
	for _, p := range []string{"/panic", "/panic-after", "/goexit", "/goexit-after", "/abort"} {
		req := httptest.NewRequest(http.MethodPost, p, strings.NewReader("{}"))
		req.Header.Set(idempotency.Header, "k"+p)
		w := httptest.NewRecorder()
		func() {
			defer func() { _ = recover() }()
			done := make(chan struct{})
			go func() {
				defer close(done)
				defer func() { _ = recover() }()
				h.ServeHTTP(w, req)
			}()
			<-done
		}()
		t.Logf("%s retry: %d %q", p, w.Code, w.Body.String())
	}
}

// ErrFull: 503 with Retry-After, never a second run.
func TestR17FullStore(t *testing.T) {
	var runs atomic.Int64
	release := make(chan struct{})
	srv := r17srv(t, idempotency.NewMemoryStore(3*(idempotency.MemoryEntryOverhead+200)), func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		<-release
		w.WriteHeader(201)
	})
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Go(func() { r17post(t, srv.URL, fmt.Sprintf("key-%d", i), "{}") })
	}
	time.Sleep(200 * time.Millisecond)
	resp, _ := r17post(t, srv.URL, "another", "{}")
	t.Logf("runs %d", runs.Load())
	assert.Equal(t, 503, resp.StatusCode)
	assert.Equal(t, "1", resp.Header.Get("Retry-After"))
	close(release)
	wg.Wait()
}

// Fingerprint: a different body, in flight and after.
func TestR17DifferentBody(t *testing.T) {
	var runs atomic.Int64
	gate := make(chan struct{})
	srv := r17srv(t, idempotency.NewMemoryStore(0), func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		<-gate
		w.WriteHeader(201)
	})
	go r17post(t, srv.URL, "k", `{"a":1}`)
	time.Sleep(100 * time.Millisecond)
	resp, _ := r17post(t, srv.URL, "k", `{"a":2}`)
	assert.Equal(t, 422, resp.StatusCode)
	close(gate)
	time.Sleep(100 * time.Millisecond)
	resp, _ = r17post(t, srv.URL, "k", `{"a":2}`)
	assert.Equal(t, 422, resp.StatusCode)
	resp, _ = r17post(t, srv.URL+"?x=1", "k", `{"a":1}`)
	assert.Equal(t, 422, resp.StatusCode)
	assert.EqualValues(t, 1, runs.Load())
}

// A client that disconnects mid-response: the retry is not served a
// partial body as complete.
func TestR17ClientGoneMidResponse(t *testing.T) {
	var runs atomic.Int64
	srv := r17srv(t, idempotency.NewMemoryStore(0), func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.Header().Set("Content-Length", "2000000")
		w.WriteHeader(200)
		chunk := strings.Repeat("x", 100000)
		for range 20 {
			if _, err := io.WriteString(w, chunk); err != nil {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}, idempotency.MaxResponse(4<<20))
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	require.NoError(t, err)
	fmt.Fprintf(conn, "POST / HTTP/1.1\r\nHost: x\r\nIdempotency-Key: k\r\nContent-Length: 2\r\n\r\n{}")
	br := bufio.NewReader(conn)
	buf := make([]byte, 50000)
	_, _ = io.ReadFull(br, buf)
	conn.Close()
	time.Sleep(500 * time.Millisecond)
	resp, body := r17post(t, srv.URL, "k", "{}")
	t.Logf("retry %d %.80q", resp.StatusCode, body)
	assert.NotEqual(t, 200, resp.StatusCode)
	assert.EqualValues(t, 1, runs.Load())
}

var _ = errors.New
