package idempotency_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/idempotency"
)

// r28Store is a MemoryStore whose Complete and Release can be made to hang
// until their context ends (a frozen store).
type r28Store struct {
	*idempotency.MemoryStore
	hangComplete atomic.Bool
	hangRelease  atomic.Bool
}

func (s *r28Store) Complete(ctx context.Context, key string, claim, rec idempotency.Record, ttl time.Duration) error {
	if s.hangComplete.Load() {
		<-ctx.Done()
		return ctx.Err()
	}
	return s.MemoryStore.Complete(ctx, key, claim, rec, ttl)
}

func (s *r28Store) Release(ctx context.Context, key string, claim idempotency.Record) error {
	if s.hangRelease.Load() {
		<-ctx.Done()
		return ctx.Err()
	}
	return s.MemoryStore.Release(ctx, key, claim)
}

func r28Post(t *testing.T, c *http.Client, url, key string) (*http.Response, []byte, error) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"a":1}`))
	require.NoError(t, err)
	req.Header.Set(idempotency.Header, key)
	resp, err := c.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, b, err
}

// A handler that writes 8 KiB (more than net/http buffers, less than
// holdMax) and then works on for a while before it returns: net/http sends
// the status and headers as its 2 KiB buffer fills; the middleware holds
// them until the handler returns. A client with a ResponseHeaderTimeout
// shorter than the handler's tail succeeds against the plain server and
// fails against the wrapped one, with a healthy store.
func TestReview28HeldPastNetHTTPBuffer(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		name := "HTTP1"
		if h2 {
			name = "HTTP2"
		}
		t.Run(name, func(t *testing.T) {
			body := strings.Repeat("x", 8<<10)
			handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/plain")
				w.WriteHeader(http.StatusCreated)
				_, _ = io.WriteString(w, body)
				time.Sleep(1500 * time.Millisecond) // e.g. an audit write after the answer
			})
			mw := idempotency.Middleware(idempotency.NewMemoryStore(0), idempotency.SharedKeys())
			start := func(h http.Handler) (*httptest.Server, *http.Client) {
				srv := httptest.NewUnstartedServer(h)
				if h2 {
					srv.EnableHTTP2 = true
					srv.StartTLS()
				} else {
					srv.Start()
				}
				c := srv.Client()
				tr := c.Transport.(*http.Transport).Clone()
				tr.ResponseHeaderTimeout = 500 * time.Millisecond
				if h2 {
					tr.ForceAttemptHTTP2 = true
				}
				return srv, &http.Client{Transport: tr}
			}
			plain, pc := start(handler)
			defer plain.Close()
			wrapped, wc := start(mw(handler))
			defer wrapped.Close()

			resp, b, err := r28Post(t, pc, plain.URL, "k1")
			require.NoError(t, err, "plain net/http")
			assert.Equal(t, http.StatusCreated, resp.StatusCode)
			assert.Equal(t, body, string(b))

			resp, b, err = r28Post(t, wc, wrapped.URL, "k1")
			require.NoError(t, err, "with the middleware, store healthy: a call a plain server completes must not fail")
			assert.Equal(t, http.StatusCreated, resp.StatusCode)
			assert.Equal(t, body, string(b))
		})
	}
}

// The same, measured: when do the status and headers reach the client?
func TestReview28TimeToHeaders(t *testing.T) {
	body := strings.Repeat("y", 8<<10)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, body)
		time.Sleep(800 * time.Millisecond)
	})
	mw := idempotency.Middleware(idempotency.NewMemoryStore(0), idempotency.SharedKeys())
	measure := func(h http.Handler) time.Duration {
		srv := httptest.NewServer(h)
		defer srv.Close()
		req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("{}"))
		req.Header.Set(idempotency.Header, "k")
		t0 := time.Now()
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		d := time.Since(t0)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return d
	}
	p, m := measure(handler), measure(mw(handler))
	t.Logf("headers after: plain %v, middleware %v", p, m)
	assert.Less(t, p, 400*time.Millisecond)
	assert.Less(t, m, 400*time.Millisecond, "net/http sends an 8 KiB response's headers before the handler returns")
}

// A handler that answers 503 (a default ReleaseStatus) while the store
// hangs: the docs say a slow store holds the answer for one StoreTimeout
// at most; the release is retried up to 4 StoreTimeouts, the answer held.
func TestReview28ReleaseStatusHeldPastStoreTimeout(t *testing.T) {
	for _, tc := range []struct {
		name    string
		handler http.HandlerFunc
	}{
		{"503", func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, "busy")
		}},
		{"Abandon", func(w http.ResponseWriter, r *http.Request) {
			idempotency.FromContext(r.Context()).Abandon()
			w.WriteHeader(http.StatusConflict)
			_, _ = io.WriteString(w, "tx failed")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &r28Store{MemoryStore: idempotency.NewMemoryStore(0)}
			const storeTimeout = 100 * time.Millisecond
			mw := idempotency.Middleware(st, idempotency.SharedKeys(), idempotency.StoreTimeout(storeTimeout), idempotency.Lease(3*time.Second))
			srv := httptest.NewServer(mw(tc.handler))
			defer srv.Close()
			st.hangRelease.Store(true)
			t0 := time.Now()
			resp, _, err := r28Post(t, srv.Client(), srv.URL, "k-"+tc.name)
			d := time.Since(t0)
			require.NoError(t, err)
			t.Logf("%s: answered after %v (StoreTimeout %v)", tc.name, d, storeTimeout)
			assert.NotZero(t, resp.StatusCode)
			assert.Less(t, d, 2*storeTimeout+100*time.Millisecond, "held for more than one StoreTimeout")
		})
	}
}

var r28Date = regexp.MustCompile(`(?m)^Date: .*\r\n`)

// raw sends a request over a fresh connection and returns all bytes read
// until the server closes it.
func r28Raw(t *testing.T, addr, key string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	_, err = io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nIdempotency-Key: "+key+"\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")
	require.NoError(t, err)
	b, err := io.ReadAll(bufio.NewReader(c))
	if err != nil && !errors.Is(err, io.EOF) {
		t.Logf("read: %v", err)
	}
	return r28Date.ReplaceAllString(string(b), "Date: X\r\n")
}

// Byte for byte against plain net/http, HTTP/1.1.
func TestReview28BytesAgainstPlain(t *testing.T) {
	cases := map[string]http.HandlerFunc{
		"trailer-prefix-after-body": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(http.StatusOK)
			_, _ = io.WriteString(w, "hello")
			w.Header().Set(http.TrailerPrefix+"X-Sum", "abc")
		},
		"103-after-200": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(http.StatusOK)
			w.Header().Set("Link", "</a.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			_, _ = io.WriteString(w, "hello")
		},
		"103-then-200": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Link", "</a.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(http.StatusOK)
			_, _ = io.WriteString(w, "hello")
		},
		"header-after-write": func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, "<html>hi")
			w.Header().Set("X-Late", "1")
			w.Header().Del("Content-Type")
		},
		"204-with-body": func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusNoContent)
			_, _ = io.WriteString(w, "nope")
		},
		"implicit-3k-SKIP": func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, strings.Repeat("z", 3000))
			w.Header().Set(http.TrailerPrefix+"X-T", "v")
		},
	}
	for name, hf := range cases {
		t.Run(name, func(t *testing.T) {
			if strings.HasSuffix(name, "-SKIP") {
				t.Skip("differs only in chunk framing (0x800+0x3b8 vs 0xbb8): same bytes decoded, not a finding")
			}
			plain := httptest.NewServer(hf)
			defer plain.Close()
			mw := idempotency.Middleware(idempotency.NewMemoryStore(0), idempotency.SharedKeys())
			wrapped := httptest.NewServer(mw(hf))
			defer wrapped.Close()
			p := r28Raw(t, plain.Listener.Addr().String(), "k")
			m := r28Raw(t, wrapped.Listener.Addr().String(), "k")
			assert.Equal(t, p, m, "the client gets what net/http sends without the middleware")
		})
	}
}

// A handler that writes and then panics, aborts or calls runtime.Goexit:
// the client's outcome (an error, or a response) is the same with the
// middleware as without.
func TestReview28PanicAfterHeldWrite(t *testing.T) {
	for _, size := range []int{10, 3000} {
		for _, how := range []string{"panic", "abort", "goexit"} {
			t.Run(how+"/"+strings.Repeat("x", 0)+map[int]string{10: "small", 3000: "3k"}[size], func(t *testing.T) {
				hf := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					w.WriteHeader(http.StatusCreated)
					_, _ = io.WriteString(w, strings.Repeat("a", size))
					switch how {
					case "panic":
						panic("boom")
					case "abort":
						panic(http.ErrAbortHandler)
					default:
						runtimeGoexit()
					}
				})
				outcome := func(h http.Handler) string {
					srv := httptest.NewServer(h)
					srv.Config.ErrorLog = nil
					defer srv.Close()
					resp, b, err := r28Post(t, srv.Client(), srv.URL, "k")
					if err != nil {
						return "error"
					}
					return resp.Status + ":" + string(b)
				}
				mw := idempotency.Middleware(idempotency.NewMemoryStore(0), idempotency.SharedKeys())
				assert.Equal(t, outcome(hf), outcome(mw(hf)))
			})
		}
	}
}

// A short response (1500 bytes, which net/http itself buffers until the
// handler returns) over MaxResponse: the doc names only flushed, over
// 64 KiB, or CL/TE/Trailer responses as not held; this one is not held
// either, so a store that hangs holds it for the whole lease of saves.
func TestReview28OverMaxResponseHeldForLease(t *testing.T) {
	st := &r28Store{MemoryStore: idempotency.NewMemoryStore(0)}
	const storeTimeout = 100 * time.Millisecond
	mw := idempotency.Middleware(st, idempotency.SharedKeys(), idempotency.StoreTimeout(storeTimeout),
		idempotency.Lease(3*time.Second), idempotency.MaxResponse(1024))
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, strings.Repeat("b", 1500))
		st.hangComplete.Store(true)
	})
	srv := httptest.NewServer(mw(h))
	defer srv.Close()
	t0 := time.Now()
	resp, b, err := r28Post(t, srv.Client(), srv.URL, "k")
	d := time.Since(t0)
	require.NoError(t, err)
	assert.Equal(t, http.StatusCreated, resp.StatusCode)
	assert.Len(t, b, 1500)
	t.Logf("answered after %v (StoreTimeout %v, lease 3s)", d, storeTimeout)
	assert.Less(t, d, 2*storeTimeout+200*time.Millisecond, "a store slow to answer holds the answer for one StoreTimeout at most")
}

// HTTP/2, store hung as the handler ends: the client gets the answer
// after one StoreTimeout; a graceful Shutdown started then waits for the
// save, which lands once the store answers; the record is there after.
func TestReview28ShutdownH2WaitsForSave(t *testing.T) {
	st := &r28Store{MemoryStore: idempotency.NewMemoryStore(0)}
	mw := idempotency.Middleware(st, idempotency.SharedKeys(), idempotency.StoreTimeout(100*time.Millisecond), idempotency.Lease(5*time.Second))
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"id":1}`)
		st.hangComplete.Store(true)
	})
	srv := httptest.NewUnstartedServer(mw(h))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	c := srv.Client()
	req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("{}"))
	req.Header.Set(idempotency.Header, "k")
	resp, err := c.Do(req)
	require.NoError(t, err)
	b := make([]byte, resp.ContentLength)
	_, err = io.ReadFull(resp.Body, b)
	require.NoError(t, err)
	assert.Equal(t, `{"id":1}`, string(b))
	go func() { time.Sleep(time.Second); st.hangComplete.Store(false) }()
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	require.NoError(t, srv.Config.Shutdown(ctx))
	t.Logf("Shutdown returned after %v", time.Since(t0))
	_ = resp.Body.Close()
	// the record is saved: a Begin on the same store finds it done
	g := idempotency.NewGuard(st)
	_, stored, err := g.Begin(context.Background(), "", "k", "")
	if err == nil && stored == nil {
		t.Fatal("no record after Shutdown: the save was lost")
	}
	t.Logf("after shutdown: stored=%v err=%v", stored != nil, err)
}

// r28Wrap is an outer middleware's ResponseWriter with no Flush and no
// Unwrap, as many logging or metrics wrappers are.
type r28Wrap struct{ w http.ResponseWriter }

func (x r28Wrap) Header() http.Header         { return x.w.Header() }
func (x r28Wrap) Write(p []byte) (int, error) { return x.w.Write(p) }
func (x r28Wrap) WriteHeader(code int)        { x.w.WriteHeader(code) }

// Store healthy: keep-alive is kept, HTTP/1, for held responses of every
// size up to and past 64 KiB.
func TestReview28KeepAliveHealthy(t *testing.T) {
	mw := idempotency.Middleware(idempotency.NewMemoryStore(0), idempotency.SharedKeys())
	var size atomic.Int64
	srv := httptest.NewUnstartedServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, strings.Repeat("q", int(size.Load())))
	})))
	var conns atomic.Int32
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	c := srv.Client()
	for i, n := range []int{0, 1, 2047, 2049, 65535, 65536, 65537, 200000} {
		size.Store(int64(n))
		resp, b, err := r28Post(t, c, srv.URL, "k"+strconv.Itoa(i))
		require.NoError(t, err)
		assert.Len(t, b, n)
		assert.False(t, resp.Close, "size %d", n)
	}
	assert.EqualValues(t, 1, conns.Load(), "one connection for all")
}
