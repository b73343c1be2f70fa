package httpclient_test

// review169: "do no harm" end to end. Against healthy but unusual servers,
// the toolkit's client (the README's quick-start pipeline, and the
// defaults) must succeed whenever net/http's plain client with the same
// overall timeout does, return the same bytes, and not send a
// non-idempotent request twice.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// review169QuickStart is the README's quick-start pipeline.
func review169QuickStart(b *breaker.Breaker) *pipeline.Pipeline {
	return pipeline.New(
		pipeline.WithTimeBudget(2*time.Second),
		pipeline.WithBreaker(b),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3))),
	)
}

type review169Client struct {
	name string
	hc   *http.Client
	b    *breaker.Breaker // nil for plain
}

// review169Clients returns the plain client (2 s timeout), the toolkit
// with the quick-start pipeline, and the toolkit with its defaults (given
// a 2 s context by the caller), each on a base made by newBase.
func review169Clients(newBase func() http.RoundTripper) []review169Client {
	b := breaker.New("review169")
	return []review169Client{
		{name: "plain", hc: &http.Client{Timeout: 2 * time.Second, Transport: newBase()}},
		{name: "quickstart", hc: &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(review169QuickStart(b)), httpclient.Base(newBase()))}, b: b},
		{name: "defaults", hc: &http.Client{Transport: httpclient.NewTransport(httpclient.Base(newBase()))}},
	}
}

func review169Base() http.RoundTripper { return http.DefaultTransport.(*http.Transport).Clone() }

func review169Sum(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:8]) }

// review169Bytes returns n deterministic pseudo-random bytes.
func review169Bytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

type review169Outcome struct {
	status int
	body   []byte
	err    error
	proto  int
}

// review169Do runs one request made by newReq through c within a 2 s
// context (the "same overall timeout") and reads the whole body.
func review169Do(c review169Client, newReq func(ctx context.Context) *http.Request, readDelay time.Duration) review169Outcome {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	resp, err := c.hc.Do(newReq(ctx))
	if err != nil {
		return review169Outcome{err: err}
	}
	defer resp.Body.Close()
	time.Sleep(readDelay)
	body, err := io.ReadAll(resp.Body)
	if len(resp.Trailer) > 0 {
		body = append(body, fmt.Sprint(" trailer:", resp.Trailer)...)
	}
	return review169Outcome{status: resp.StatusCode, body: body, err: err, proto: resp.ProtoMajor}
}

// review169Same asserts every toolkit client got what the plain client got.
func review169Same(t *testing.T, clients []review169Client, newReq func(ctx context.Context) *http.Request, readDelay time.Duration) {
	t.Helper()
	var plain review169Outcome
	for i, c := range clients {
		o := review169Do(c, newReq, readDelay)
		if i == 0 {
			plain = o
			if o.err != nil {
				t.Fatalf("plain client failed (test server broken?): %v", o.err)
			}
			continue
		}
		if o.err != nil {
			t.Errorf("%s: failed where the plain client got %d: %v", c.name, plain.status, o.err)
			continue
		}
		if o.status != plain.status || !bytes.Equal(o.body, plain.body) || o.proto != plain.proto {
			t.Errorf("%s: got %d proto %d %d bytes (%s), plain got %d proto %d %d bytes (%s)", c.name, o.status, o.proto, len(o.body), review169Sum(o.body),
				plain.status, plain.proto, len(plain.body), review169Sum(plain.body))
		}
		if c.b != nil && c.b.State() != resilience.StateClosed {
			t.Errorf("%s: breaker %v against a healthy server", c.name, c.b.State())
		}
	}
}

// review169Counter counts the requests a server got per X-Review-ID, to
// find a non-idempotent request sent twice.
type review169Counter struct {
	mu   sync.Mutex
	seen map[string]int
}

func (c *review169Counter) note(r *http.Request) {
	id := r.Header.Get("X-Review-ID")
	if id == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen == nil {
		c.seen = map[string]int{}
	}
	c.seen[r.Host+" "+id]++
}

func (c *review169Counter) twice(t *testing.T) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, n := range c.seen {
		if n > 1 {
			t.Errorf("request %s reached the healthy server %d times", id, n)
		}
	}
}

var review169ID atomic.Int64

func review169NewID() string { return fmt.Sprint("r169-", review169ID.Add(1)) }

// echo answers with the method, the request body's sum and length.
func review169Echo(cnt *review169Counter) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		cnt.note(r)
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		fmt.Fprintf(w, "%s %s %d", r.Method, review169Sum(b), len(b))
	}
}

func TestReview169_HealthyUnusualHTTP1(t *testing.T) {
	cnt := &review169Counter{}
	big := review169Bytes(32<<20, 1)
	var raCount atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("/slowfirst", func(w http.ResponseWriter, r *http.Request) {
		cnt.note(r)
		time.Sleep(700 * time.Millisecond)
		w.Write([]byte("late but fine"))
	})
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		cnt.note(r)
		w.Header().Set("Content-Type", "application/octet-stream")
		f := w.(http.Flusher)
		for off := 0; off < len(big); off += 64 << 10 {
			if _, err := w.Write(big[off:min(off+64<<10, len(big))]); err != nil {
				return
			}
			f.Flush()
		}
	})
	mux.HandleFunc("/chunked", func(w http.ResponseWriter, r *http.Request) {
		cnt.note(r)
		f := w.(http.Flusher)
		for i := range 10 {
			fmt.Fprintf(w, "piece %d;", i)
			f.Flush()
			time.Sleep(10 * time.Millisecond)
		}
	})
	mux.HandleFunc("/trailer", func(w http.ResponseWriter, r *http.Request) {
		cnt.note(r)
		w.Header().Set("Trailer", "X-Sum")
		w.Write([]byte("body with a trailer"))
		w.(http.Flusher).Flush()
		w.Header().Set("X-Sum", "abc")
	})
	mux.HandleFunc("/hints", func(w http.ResponseWriter, r *http.Request) {
		cnt.note(r)
		w.Header().Set("Link", "</style.css>; rel=preload; as=style")
		w.WriteHeader(http.StatusEarlyHints)
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
		w.Write([]byte("after hints"))
	})
	mux.HandleFunc("/expect", review169Echo(cnt))
	mux.HandleFunc("/echo", review169Echo(cnt))
	mux.HandleFunc("/204", func(w http.ResponseWriter, r *http.Request) { cnt.note(r); w.WriteHeader(204) })
	mux.HandleFunc("/304", func(w http.ResponseWriter, r *http.Request) {
		cnt.note(r)
		w.Header().Set("ETag", `"v1"`)
		if r.Header.Get("If-None-Match") == `"v1"` {
			w.WriteHeader(304)
			return
		}
		w.Write([]byte("v1 body"))
	})
	mux.HandleFunc("/slowread", func(w http.ResponseWriter, r *http.Request) {
		cnt.note(r)
		var all []byte
		buf := make([]byte, 64<<10)
		for {
			n, err := r.Body.Read(buf)
			before := len(all)
			all = append(all, buf[:n]...)
			if err != nil {
				break
			}
			if len(all)/(64<<10) != before/(64<<10) {
				time.Sleep(15 * time.Millisecond) // about 4 MB/s
			}
		}
		fmt.Fprintf(w, "%s %s %d", r.Method, review169Sum(all), len(all))
	})
	mux.HandleFunc("/ra", func(w http.ResponseWriter, r *http.Request) {
		cnt.note(r)
		if raCount.Add(1)%2 == 1 {
			w.Header().Set("Retry-After", "1")
			http.Error(w, "later", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("now"))
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()

	get := func(path string, hdr ...string) func(ctx context.Context) *http.Request {
		return func(ctx context.Context) *http.Request {
			r, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+path, nil)
			for i := 0; i+1 < len(hdr); i += 2 {
				r.Header.Set(hdr[i], hdr[i+1])
			}
			r.Header.Set("X-Review-ID", review169NewID())
			return r
		}
	}
	withBody := func(method, path string, body []byte, pipe bool, hdr ...string) func(ctx context.Context) *http.Request {
		return func(ctx context.Context) *http.Request {
			var r *http.Request
			if pipe {
				pr, pw := io.Pipe()
				go func() {
					for off := 0; off < len(body); off += 7000 {
						if _, err := pw.Write(body[off:min(off+7000, len(body))]); err != nil {
							return
						}
					}
					pw.Close()
				}()
				r, _ = http.NewRequestWithContext(ctx, method, srv.URL+path, pr)
				r.ContentLength = -1
			} else {
				r, _ = http.NewRequestWithContext(ctx, method, srv.URL+path, bytes.NewReader(body))
			}
			for i := 0; i+1 < len(hdr); i += 2 {
				r.Header.Set(hdr[i], hdr[i+1])
			}
			r.Header.Set("X-Review-ID", review169NewID())
			return r
		}
	}
	small := review169Bytes(100<<10, 2)
	mid := review169Bytes(3<<20, 3)
	cases := []struct {
		name      string
		req       func(ctx context.Context) *http.Request
		readDelay time.Duration
	}{
		{"slow first byte", get("/slowfirst"), 0},
		{"32MB streamed, read after Do returns", get("/big"), 300 * time.Millisecond},
		{"chunked", get("/chunked"), 0},
		{"103 early hints", get("/hints"), 0},
		{"trailer", get("/trailer"), 0},
		{"204", get("/204"), 0},
		{"304", get("/304", "If-None-Match", `"v1"`), 0},
		{"PUT 100-continue", withBody("PUT", "/expect", small, false, "Expect", "100-continue"), 0},
		{"POST 100-continue", withBody("POST", "/expect", small, false, "Expect", "100-continue"), 0},
		{"POST pipe 100-continue", withBody("POST", "/expect", small, true, "Expect", "100-continue"), 0},
		{"PUT pipe 100-continue", withBody("PUT", "/expect", small, true, "Expect", "100-continue"), 0},
		{"POST pipe 3MB", withBody("POST", "/echo", mid, true), 0},
		{"PUT pipe 3MB", withBody("PUT", "/echo", mid, true), 0},
		{"PATCH pipe 100KB", withBody("PATCH", "/echo", small, true), 0},
		{"PUT pipe 100KB", withBody("PUT", "/echo", small, true), 0},
		{"PUT 3MB to slow reader", withBody("PUT", "/slowread", mid, false), 0},
		{"POST pipe 3MB to slow reader", withBody("POST", "/slowread", mid, true), 0},
		{"PUT pipe 3MB to slow reader", withBody("PUT", "/slowread", mid, true), 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			review169Same(t, review169Clients(review169Base), tc.req, tc.readDelay)
		})
	}
	cnt.twice(t)
}

// A 503 with a Retry-After, then a 200: the plain client completes with
// the 503; the toolkit must complete too (the 503 or the 200), and a POST
// without a key must reach the server once and come back as the 503.
func TestReview169_RetryAfterThenOK(t *testing.T) {
	var n atomic.Int64
	var posts atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == "POST" {
			posts.Add(1)
		}
		if n.Add(1)%2 == 1 {
			w.Header().Set("Retry-After", "1")
			http.Error(w, "later", http.StatusTooManyRequests)
			return
		}
		w.Write([]byte("ok"))
	}))
	defer srv.Close()
	for _, c := range review169Clients(review169Base)[1:] {
		n.Store(0)
		o := review169Do(c, func(ctx context.Context) *http.Request {
			r, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
			return r
		}, 0)
		if o.err != nil || (o.status != 200 && o.status != 429) {
			t.Errorf("%s GET: %d %v", c.name, o.status, o.err)
		}
		n.Store(0)
		posts.Store(0)
		o = review169Do(c, func(ctx context.Context) *http.Request {
			r, _ := http.NewRequestWithContext(ctx, "POST", srv.URL, strings.NewReader("x"))
			return r
		}, 0)
		if o.err != nil || o.status != 429 || posts.Load() != 1 {
			t.Errorf("%s POST without key: status %d err %v, server got %d POSTs, want the 429 once", c.name, o.status, o.err, posts.Load())
		}
	}
}

// A server that always asks to come back in 5 s: the plain client (2 s
// timeout) returns the 503 at once. The toolkit must not turn it into a
// timeout: "No delay is slept that would end past it; the last error comes
// back at once instead" — for the quick-start budget, and for the
// caller's own 2 s deadline with the defaults.
func TestReview169_RetryAfterPastBudget(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "5")
		http.Error(w, "later", http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	for _, c := range review169Clients(review169Base) {
		start := time.Now()
		o := review169Do(c, func(ctx context.Context) *http.Request {
			r, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
			return r
		}, 0)
		el := time.Since(start)
		if o.err != nil || o.status != 503 {
			t.Errorf("%s: got %d %v after %v, want the 503 (the plain client's answer)", c.name, o.status, o.err, el)
		} else if el > 500*time.Millisecond {
			t.Errorf("%s: the 503 came back after %v: slept toward a delay past the deadline", c.name, el)
		}
	}
}

// Redirects, to the same and to another host, with a body.
func TestReview169_Redirects(t *testing.T) {
	cnt := &review169Counter{}
	other := httptest.NewServer(review169Echo(cnt))
	defer other.Close()
	otherURL := strings.Replace(other.URL, "127.0.0.1", "localhost", 1) // another host name
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cnt.note(r)
		var code int
		fmt.Sscan(strings.TrimPrefix(r.URL.Path, "/"), &code)
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Location", otherURL+"/landed")
		w.WriteHeader(code)
		w.Write([]byte("moved"))
	}))
	defer srv.Close()
	body := review169Bytes(50<<10, 9)
	for _, code := range []int{301, 302, 303, 307, 308} {
		for _, method := range []string{"GET", "POST", "PUT"} {
			for _, pipe := range []bool{false, true} {
				if method == "GET" && pipe {
					continue
				}
				t.Run(fmt.Sprint(code, method, pipe), func(t *testing.T) {
					review169Same(t, review169Clients(review169Base), func(ctx context.Context) *http.Request {
						var rd io.Reader
						if method != "GET" {
							if pipe {
								pr, pw := io.Pipe()
								go func() { pw.Write(body); pw.Close() }()
								rd = pr
							} else {
								rd = bytes.NewReader(body)
							}
						}
						r, _ := http.NewRequestWithContext(ctx, method, fmt.Sprint(srv.URL, "/", code), rd)
						if pipe {
							r.ContentLength = -1
						}
						r.Header.Set("X-Review-ID", review169NewID())
						return r
					}, 0)
				})
			}
		}
	}
	cnt.twice(t)
}

// HTTP/2 over TLS: the same answers, over HTTP/2, and a full-duplex echo.
func TestReview169_HTTP2(t *testing.T) {
	cnt := &review169Counter{}
	big := review169Bytes(8<<20, 4)
	mux := http.NewServeMux()
	mux.HandleFunc("/echo", review169Echo(cnt))
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) { cnt.note(r); w.Write(big) })
	mux.HandleFunc("/204", func(w http.ResponseWriter, r *http.Request) { cnt.note(r); w.WriteHeader(204) })
	srv := httptest.NewUnstartedServer(mux)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	base := func() http.RoundTripper { return srv.Client().Transport.(*http.Transport).Clone() }
	body := review169Bytes(200<<10, 5)
	for _, tc := range []struct {
		name, method, path string
		pipe               bool
	}{{"GET big", "GET", "/big", false}, {"204", "GET", "/204", false}, {"POST", "POST", "/echo", false},
		{"POST pipe", "POST", "/echo", true}, {"PUT pipe", "PUT", "/echo", true}, {"PUT", "PUT", "/echo", false}} {
		t.Run(tc.name, func(t *testing.T) {
			review169Same(t, review169Clients(base), func(ctx context.Context) *http.Request {
				var rd io.Reader
				if tc.method != "GET" {
					if tc.pipe {
						pr, pw := io.Pipe()
						go func() { pw.Write(body); pw.Close() }()
						rd = pr
					} else {
						rd = bytes.NewReader(body)
					}
				}
				r, _ := http.NewRequestWithContext(ctx, tc.method, srv.URL+tc.path, rd)
				if tc.pipe {
					r.ContentLength = -1
				}
				r.Header.Set("X-Review-ID", review169NewID())
				return r
			}, 0)
		})
	}
	cnt.twice(t)
}

// review169Duplex: the server echoes each line as it reads it; the client
// writes the next line only after it read the echo of the previous one.
func review169Duplex(t *testing.T, hc *http.Client, url, method string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	pr, pw := io.Pipe()
	req, _ := http.NewRequestWithContext(ctx, method, url, pr)
	req.ContentLength = -1
	type res struct {
		resp *http.Response
		err  error
	}
	ch := make(chan res, 1)
	go func() { resp, err := hc.Do(req); ch <- res{resp, err} }()
	// The server answers its header before reading: Do returns first.
	var r res
	select {
	case r = <-ch:
	case <-time.After(1500 * time.Millisecond):
		pw.CloseWithError(fmt.Errorf("test gave up"))
		t.Fatalf("Do did not return the duplex answer's header")
	}
	if r.err != nil {
		t.Fatalf("Do: %v", r.err)
	}
	defer r.resp.Body.Close()
	br := bufio.NewReader(r.resp.Body)
	for i := range 5 {
		line := fmt.Sprintf("line %d\n", i)
		done := make(chan struct{})
		go func() {
			select {
			case <-done:
			case <-time.After(time.Second):
				pw.CloseWithError(fmt.Errorf("stuck"))
				r.resp.Body.Close()
			}
		}()
		if _, err := pw.Write([]byte(line)); err != nil {
			close(done)
			t.Fatalf("write %d: %v", i, err)
		}
		got, err := br.ReadString('\n')
		close(done)
		if err != nil || got != line {
			t.Fatalf("echo %d: %q %v", i, got, err)
		}
	}
	pw.Close()
}

func TestReview169_FullDuplex(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		rc.EnableFullDuplex() // HTTP/1; HTTP/2 is duplex anyway
		w.WriteHeader(200)
		rc.Flush()
		br := bufio.NewReader(r.Body)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			w.Write([]byte(line))
			rc.Flush()
		}
	})
	srv1 := httptest.NewServer(h)
	defer srv1.Close()
	srv2 := httptest.NewUnstartedServer(h)
	srv2.EnableHTTP2 = true
	srv2.StartTLS()
	defer srv2.Close()
	for _, s := range []struct {
		name string
		url  string
		base func() http.RoundTripper
	}{{"h1", srv1.URL, review169Base}, {"h2", srv2.URL, func() http.RoundTripper { return srv2.Client().Transport.(*http.Transport).Clone() }}} {
		for _, method := range []string{"POST", "PUT"} {
			for _, c := range review169Clients(s.base) {
				t.Run(s.name+" "+method+" "+c.name, func(t *testing.T) { review169Duplex(t, c.hc, s.url, method) })
			}
		}
	}
}

// A server that closes kept-alive connections between requests (a short
// idle timeout), and one that closes each connection a moment after it
// answered, without saying so.
func TestReview169_KeepAliveClosed(t *testing.T) {
	cnt := &review169Counter{}
	srv := httptest.NewUnstartedServer(review169Echo(cnt))
	srv.Config.IdleTimeout = 20 * time.Millisecond
	srv.Start()
	defer srv.Close()
	var closing atomic.Int64
	srv2 := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cnt.note(r)
		b, _ := io.ReadAll(r.Body)
		msg := fmt.Sprintf("%s %s %d", r.Method, review169Sum(b), len(b))
		w.Header().Set("Content-Length", fmt.Sprint(len(msg)))
		w.Write([]byte(msg))
		w.(http.Flusher).Flush()
		rc := http.NewResponseController(w)
		c, _, err := rc.Hijack()
		if err == nil {
			closing.Add(1)
			go func() { time.Sleep(time.Millisecond); c.Close() }()
		}
	}))
	defer srv2.Close()
	body := []byte("payload")
	for _, c := range review169Clients(review169Base) {
		fails := 0
		for i := range 20 {
			for _, s := range []struct {
				url   string
				pause time.Duration
			}{{srv.URL, 40 * time.Millisecond}, {srv2.URL, 2 * time.Millisecond}} {
				method := []string{"GET", "POST", "PUT"}[i%3]
				o := review169Do(c, func(ctx context.Context) *http.Request {
					var rd io.Reader
					if method != "GET" {
						rd = bytes.NewReader(body)
					}
					r, _ := http.NewRequestWithContext(ctx, method, s.url, rd)
					r.Header.Set("X-Review-ID", review169NewID())
					return r
				}, 0)
				if o.err != nil || o.status != 200 {
					fails++
					t.Logf("%s %s %s: %d %v", c.name, method, s.url, o.status, o.err)
				}
				time.Sleep(s.pause)
			}
		}
		if c.name != "plain" && fails > 0 {
			t.Errorf("%s: %d of 40 calls failed against servers closing kept-alive connections", c.name, fails)
		}
	}
	cnt.twice(t)
}

// Context values, a caller's httptrace and trace headers reach the base
// and the server unchanged.
func TestReview169_ContextAndTrace(t *testing.T) {
	type key struct{}
	var gotTP atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotTP.Store(r.Header.Get("Traceparent") + "|" + r.Header.Get("Tracestate") + "|" + r.Header.Get("Baggage"))
		w.Write([]byte("ok"))
	}))
	defer srv.Close()
	var baseSaw atomic.Value
	base := review169RT(func(r *http.Request) (*http.Response, error) {
		baseSaw.Store(fmt.Sprint(r.Context().Value(key{})))
		return http.DefaultTransport.RoundTrip(r)
	})
	for _, c := range review169Clients(func() http.RoundTripper { return base })[1:] {
		var gotConn, wrote, first atomic.Bool
		trace := &httptrace.ClientTrace{
			GotConn:              func(httptrace.GotConnInfo) { gotConn.Store(true) },
			WroteRequest:         func(httptrace.WroteRequestInfo) { wrote.Store(true) },
			GotFirstResponseByte: func() { first.Store(true) },
		}
		ctx := context.WithValue(context.Background(), key{}, "the-value")
		ctx = httptrace.WithClientTrace(ctx, trace)
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
		tp := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		req.Header.Set("Traceparent", tp)
		req.Header.Set("Tracestate", "a=b")
		req.Header.Set("Baggage", "user=1")
		resp, err := c.hc.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		cancel()
		if got := baseSaw.Load(); got != "the-value" {
			t.Errorf("%s: base saw context value %v", c.name, got)
		}
		if got := gotTP.Load(); got != tp+"|a=b|user=1" {
			t.Errorf("%s: server saw trace headers %q", c.name, got)
		}
		if !gotConn.Load() || !wrote.Load() || !first.Load() {
			t.Errorf("%s: caller's trace hooks: GotConn %v WroteRequest %v GotFirstResponseByte %v", c.name, gotConn.Load(), wrote.Load(), first.Load())
		}
		if len(req.Header) != 3 {
			t.Errorf("%s: the caller's request header was modified: %v", c.name, req.Header)
		}
	}
}

type review169RT func(*http.Request) (*http.Response, error)

func (f review169RT) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
