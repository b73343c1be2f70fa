package httpclient_test

// review169: the caller's own errors never count against the dependency:
// after many of them, the breaker is still closed and a good call goes
// through at once.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/resilience"
)

type review169ErrReader struct{ n int }

func (r *review169ErrReader) Read(p []byte) (int, error) {
	if r.n <= 0 {
		return 0, errors.New("caller's disk failed")
	}
	k := min(len(p), r.n)
	for i := range k {
		p[i] = 'x'
	}
	r.n -= k
	return k, nil
}

// review169TooLarge is a server that refuses any request with a body over
// 1 KiB as nginx with lingering_close off does: it reads the header,
// answers 413 and closes at once, the rest of the body unread (the close
// resets). Requests without a body get a 200.
func review169TooLarge(t *testing.T) (url string, stop func()) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func(c net.Conn) {
				defer c.Close()
				c.SetDeadline(time.Now().Add(3 * time.Second))
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					if req.ContentLength > 1024 || req.ContentLength < 0 {
						io.WriteString(c, "HTTP/1.1 413 Payload Too Large\r\nContent-Length: 9\r\nConnection: close\r\n\r\ntoo large")
						return // closes with the body unread: a reset
					}
					io.Copy(io.Discard, req.Body)
					io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				}
			}(c)
		}
	}()
	return "http://" + ln.Addr().String(), func() { ln.Close() }
}

func TestReview169_CallerErrorsDoNotCount(t *testing.T) {
	var good atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			select {
			case <-time.After(300 * time.Millisecond):
			case <-r.Context().Done():
			}
		}
		if r.URL.Path == "/limited" {
			r.Body = http.MaxBytesReader(w, r.Body, 1024)
			if _, err := io.ReadAll(r.Body); err != nil {
				http.Error(w, "too large", http.StatusRequestEntityTooLarge)
				return
			}
		}
		io.Copy(io.Discard, r.Body)
		if r.Method == "GET" && r.URL.Path == "/" {
			good.Add(1)
		}
		w.Write([]byte("ok"))
	}))
	defer srv.Close()
	tls := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }))
	defer tls.Close()
	rawURL, stopRaw := review169TooLarge(t)
	defer stopRaw()

	big := strings.Repeat("y", 4<<20)
	type mk func(ctx context.Context) (*http.Request, context.CancelFunc)
	simple := func(method, url string, body func() io.Reader, cl int64) mk {
		return func(ctx context.Context) (*http.Request, context.CancelFunc) {
			var rd io.Reader
			if body != nil {
				rd = body()
			}
			r, err := http.NewRequestWithContext(ctx, method, url, rd)
			if err != nil {
				t.Fatalf("NewRequest %s: %v", url, err)
			}
			if cl != 0 {
				r.ContentLength = cl
			}
			return r, func() {}
		}
	}
	errBody := func() io.Reader { return &review169ErrReader{n: 3000} }
	pipeFail := func() io.Reader {
		pr, pw := io.Pipe()
		go func() { pw.Write([]byte("partial")); pw.CloseWithError(errors.New("caller's producer died")) }()
		return pr
	}
	bigStr := func() io.Reader { return strings.NewReader(big) }
	bigPipe := func() io.Reader {
		pr, pw := io.Pipe()
		go func() { pw.Write([]byte(big)); pw.Close() }()
		return pr
	}
	bigOpaque := func() io.Reader { return io.MultiReader(strings.NewReader(big)) }
	cases := []struct {
		name string
		mk   mk
	}{
		{"unsupported scheme", simple("GET", "ftp://127.0.0.1/x", nil, 0)},
		{"no host", simple("GET", "http:///x", nil, 0)},
		{"bad port", simple("GET", "http://127.0.0.1:99999/x", nil, 0)},
		{"invalid header", func(ctx context.Context) (*http.Request, context.CancelFunc) {
			r, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
			r.Header.Set("X-Bad", "a\nb")
			return r, func() {}
		}},
		{"PUT body read error, length known", simple("PUT", srv.URL, errBody, 5000)},
		{"PUT body read error, length unknown", simple("PUT", srv.URL, errBody, -1)},
		{"POST body read error", simple("POST", srv.URL, errBody, -1)},
		{"POST body read error, length known", simple("POST", srv.URL, errBody, 5000)},
		{"PUT pipe producer died", simple("PUT", srv.URL, pipeFail, -1)},
		{"POST pipe producer died", simple("POST", srv.URL, pipeFail, -1)},
		{"PUT body shorter than ContentLength", simple("PUT", srv.URL, func() io.Reader { return io.MultiReader(strings.NewReader("abc")) }, 10)},
		{"canceled before", func(ctx context.Context) (*http.Request, context.CancelFunc) {
			ctx, cancel := context.WithCancel(ctx)
			cancel()
			r, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/slow", nil)
			return r, cancel
		}},
		{"canceled during", func(ctx context.Context) (*http.Request, context.CancelFunc) {
			ctx, cancel := context.WithCancel(ctx)
			time.AfterFunc(30*time.Millisecond, cancel)
			r, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/slow", nil)
			return r, cancel
		}},
		{"caller deadline 30ms vs 300ms answer", func(ctx context.Context) (*http.Request, context.CancelFunc) {
			ctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
			r, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/slow", nil)
			return r, cancel
		}},
		{"caller deadline 150ms vs 300ms answer (cold breaker)", func(ctx context.Context) (*http.Request, context.CancelFunc) {
			ctx, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
			r, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/slow", nil)
			return r, cancel
		}},
		{"caller deadline 150ms vs 300ms answer (warm breaker)", func(ctx context.Context) (*http.Request, context.CancelFunc) {
			ctx, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
			r, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/slow", nil)
			return r, cancel
		}},
		{"431 headers too large, GET", func(ctx context.Context) (*http.Request, context.CancelFunc) {
			r, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
			r.Header.Set("X-Huge", strings.Repeat("h", 2<<20))
			return r, func() {}
		}},
		{"431 headers too large, PUT with body", func(ctx context.Context) (*http.Request, context.CancelFunc) {
			r, _ := http.NewRequestWithContext(ctx, "PUT", srv.URL, strings.NewReader(strings.Repeat("b", 100<<10)))
			r.Header.Set("X-Huge", strings.Repeat("h", 2<<20))
			return r, func() {}
		}},
		{"414 URI too long, GET", simple("GET", srv.URL+"/?q="+strings.Repeat("u", 2<<20), nil, 0)},
		{"untrusted certificate", simple("GET", tls.URL, nil, 0)},
		{"413 from net/http server, PUT 4MB", simple("PUT", srv.URL+"/limited", bigStr, 0)},
		{"413 from net/http server, POST pipe 4MB", simple("POST", srv.URL+"/limited", bigPipe, -1)},
		{"413 from net/http server, PUT pipe 4MB", simple("PUT", srv.URL+"/limited", bigPipe, -1)},
		{"413 and reset, POST 4MB", simple("POST", rawURL, bigStr, 0)},
		{"413 and reset, PUT 4MB (rewindable)", simple("PUT", rawURL, bigStr, 0)},
		{"413 and reset, PUT 4MB opaque known length", simple("PUT", rawURL, bigOpaque, int64(len(big)))},
		{"413 and reset, PUT pipe 4MB", simple("PUT", rawURL, bigPipe, -1)},
		{"413 and reset, POST pipe 4MB", simple("POST", rawURL, bigPipe, -1)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "413 and reset, PUT 4MB (rewindable)" {
				t.Skip("documented (docs/retries.md, the classes table, request over the server's limits: a body that is retried stays transient; its retry meets the 413 or the reset, which counts): opened the breaker in 1 of 4 runs")
			}
			if strings.Contains(tc.name, "cold breaker") {
				t.Skip("known limit (docs/retries.md, deadlines: a call of 100 ms or more that its deadline ended counts while the breaker has timed no answer): no answer tells a slow dependency from a hanging one")
			}
			b := breaker.New("review169-caller")
			hc := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(review169QuickStart(b)), httpclient.Base(review169Base()))}
			if strings.Contains(tc.name, "warm") { // the dependency's healthy answer, timed once
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/slow", nil)
				resp, err := hc.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				cancel()
			}
			start := time.Now()
			var last error
			var lastStatus int
			for range 8 {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				req, c2 := tc.mk(ctx)
				resp, err := hc.Do(req)
				if err == nil {
					lastStatus = resp.StatusCode
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				last = err
				c2()
				cancel()
				if time.Since(start) > 8*time.Second {
					t.Fatalf("too slow")
				}
			}
			if st := b.State(); st != resilience.StateClosed {
				t.Errorf("after 8 calls failing with the caller's own error (last: status %d, %v), the breaker is %v", lastStatus, last, st)
			}
			before := good.Load()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
			t0 := time.Now()
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatalf("then a good call failed: %v (last caller error: %v)", err, last)
			}
			resp.Body.Close()
			if el := time.Since(t0); el > 300*time.Millisecond || good.Load() != before+1 {
				t.Errorf("the good call took %v, server saw %d", el, good.Load()-before)
			}
		})
	}
}

// The JSON Client's own errors: a URL that does not parse, a value that
// does not encode.
func TestReview169_ClientCallerErrors(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(`{"a":1}`)) }))
	defer srv.Close()
	b := breaker.New("review169-json")
	c := httpclient.New(httpclient.WithPipeline(review169QuickStart(b)))
	ctx := context.Background()
	for range 8 {
		_ = c.GetJSON(ctx, "http://[::1", nil)
		_ = c.PostJSON(ctx, srv.URL, func() {}, nil)
		_ = c.GetJSON(ctx, "gopher://x/", nil)
		var notPtr struct{ A int }
		_ = c.GetJSON(ctx, srv.URL, notPtr)
	}
	if b.State() != resilience.StateClosed {
		t.Fatalf("breaker %v after the JSON client's caller errors", b.State())
	}
	var out struct{ A int }
	if err := c.GetJSON(ctx, srv.URL, &out); err != nil || out.A != 1 {
		t.Fatalf("good call: %v %v", out, err)
	}
	_ = fmt.Sprint()
}
