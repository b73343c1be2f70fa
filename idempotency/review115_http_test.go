package idempotency_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/idempotency"
)

// rawPost sends a keyed POST on a new connection and returns what came
// back, read until the server closes the connection or 2 s pass.
func rawPost(t *testing.T, addr, key string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	io.WriteString(c, "POST /pay HTTP/1.1\r\nHost: x\r\nIdempotency-Key: "+key+"\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")
	b, _ := io.ReadAll(c)
	return string(b)
}

// TestReview115_HijackThenPanicRunsTwice: a handler hijacks the
// connection, commits (charges), writes its answer on the raw connection,
// and then panics (or calls runtime.Goexit) as it cleans up. The
// middleware saw no status, so it frees the key, "after a panic, the key is
// freed if no status had been written": a retry charges again. A hijacked
// connection has answered; its key must not be freed (the docs store a
// hijacked answer as not replayable otherwise).
func TestReview115_HijackThenPanicRunsTwice(t *testing.T) {
	for _, how := range []string{"panic", "Goexit"} {
		t.Run(how, func(t *testing.T) {
			var charges atomic.Int64
			mw := idempotency.Middleware(idempotency.NewMemoryStore(0), idempotency.SharedKeys())
			srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				conn, bw, err := http.NewResponseController(w).Hijack()
				if err != nil {
					t.Errorf("hijack: %v", err)
					return
				}
				charges.Add(1)
				bw.WriteString("HTTP/1.1 201 Created\r\nContent-Length: 7\r\nConnection: close\r\n\r\ncharged")
				bw.Flush()
				conn.Close()
				if how == "panic" {
					panic(http.ErrAbortHandler) // a cleanup that fails
				}
				runtime.Goexit()
			})))
			defer srv.Close()
			addr := strings.TrimPrefix(srv.URL, "http://")
			first := rawPost(t, addr, "k1")
			if !strings.Contains(first, "201 Created") {
				t.Fatalf("first: %q", first)
			}
			time.Sleep(100 * time.Millisecond) // the handler ends after its client has the answer
			second := rawPost(t, addr, "k1")
			t.Logf("second: %q", second)
			if n := charges.Load(); n != 1 {
				t.Errorf("a hijacked answer then a %s: the handler ran %d times for one key (retry got %q)", how, n, firstLine(second))
			}
		})
	}
}

func firstLine(s string) string { l, _, _ := strings.Cut(s, "\r\n"); return l }

// TestReview115_NonCanonicalSetCookieIsReplayed: Set-Cookie is never
// replayed (ReplayExclude's default), but a handler that sets it through
// the map with a lower-case name (as some libraries do) gets it stored
// and replayed to the repeat.
func TestReview115_NonCanonicalSetCookieIsReplayed(t *testing.T) {
	mw := idempotency.Middleware(idempotency.NewMemoryStore(0), idempotency.SharedKeys())
	srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header()["set-cookie"] = []string{"session=secret-of-the-first"}
		w.WriteHeader(http.StatusCreated)
	})))
	defer srv.Close()
	post := func() *http.Response {
		req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("{}"))
		req.Header.Set(idempotency.Header, "k")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	first := post()
	if first.Header.Get("Set-Cookie") == "" {
		t.Skip("net/http did not send the lower-case set-cookie")
	}
	second := post()
	if second.Header.Get(idempotency.ReplayedHeader) != "true" {
		t.Fatalf("not replayed: %v", second.Header)
	}
	if c := second.Header.Values("Set-Cookie"); len(c) > 0 {
		t.Errorf("replay carries Set-Cookie %q, which ReplayExclude excludes", c)
	}
}

// TestReview115_EarlyHintsNotReplayed: a 103 Early Hints the first answer
// sent is not in the replay, as docs/idempotency.md's "What the middleware
// does not replay" says; the final answer is, whole.
func TestReview115_EarlyHintsNotReplayed(t *testing.T) {
	mw := idempotency.Middleware(idempotency.NewMemoryStore(0), idempotency.SharedKeys())
	srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</style.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.WriteHeader(http.StatusCreated)
	})))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	first := rawPost(t, addr, "k")
	second := rawPost(t, addr, "k")
	if !strings.Contains(first, "103 Early Hints") {
		t.Skipf("no 103 on the first: %q", first)
	}
	if strings.Contains(second, "103 Early Hints") || !strings.Contains(second, "201 Created") {
		t.Errorf("the replay: %q (first: %q), want the 201 alone", second, first)
	}
}

var _ = bufio.NewReader
