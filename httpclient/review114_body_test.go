package httpclient_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// r114Body is a body whose reads and closes are counted, and that fails
// the test's check if two goroutines read it at once.
type r114Body struct {
	r       *bytes.Reader
	name    string
	closes  atomic.Int32
	reading atomic.Int32
	overlap atomic.Bool
	reads   atomic.Int64
	closedR atomic.Bool // read after close
}

func (b *r114Body) Read(p []byte) (int, error) {
	if b.reading.Add(1) > 1 {
		b.overlap.Store(true)
	}
	defer b.reading.Add(-1)
	if b.closes.Load() > 0 {
		b.closedR.Store(true)
		return 0, errors.New("read after close")
	}
	n, err := b.r.Read(p)
	b.reads.Add(int64(n))
	return n, err
}

func (b *r114Body) Close() error { b.closes.Add(1); return nil }

// r114Req is a request with a tracked body and a GetBody of tracked copies.
type r114Req struct {
	mu     sync.Mutex
	bodies []*r114Body
	gets   atomic.Int32
}

func (rq *r114Req) new(method, url string, payload []byte) *http.Request {
	first := &r114Body{r: bytes.NewReader(payload), name: "Body"}
	rq.bodies = append(rq.bodies, first)
	req, _ := http.NewRequest(method, url, first)
	req.ContentLength = int64(len(payload))
	req.GetBody = func() (io.ReadCloser, error) {
		rq.gets.Add(1)
		c := &r114Body{r: bytes.NewReader(payload), name: "copy"}
		rq.mu.Lock()
		rq.bodies = append(rq.bodies, c)
		rq.mu.Unlock()
		return c, nil
	}
	return req
}

// check waits for every body handed out to be closed once, and none to be
// read twice at once or after its close.
func (rq *r114Req) check(t *testing.T) { rq.checkFirst(t, 1) }

// checkFirst is check with the caller's Body closed wantFirst times (a
// redirect's http.Client closes it too).
func (rq *r114Req) checkFirst(t *testing.T, wantFirst int32) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		rq.mu.Lock()
		bodies := append([]*r114Body(nil), rq.bodies...)
		rq.mu.Unlock()
		allClosed := true
		for _, b := range bodies {
			if b.closes.Load() == 0 {
				allClosed = false
			}
		}
		if allClosed || time.Now().After(deadline) {
			for i, b := range bodies {
				want := int32(1)
				if i == 0 {
					want = wantFirst
				}
				if c := b.closes.Load(); c != want {
					t.Errorf("body %d (%s) closed %d times, want %d", i, b.name, c, want)
				}
				if b.overlap.Load() {
					t.Errorf("body %d (%s) read by two goroutines at once", i, b.name)
				}
				if b.closedR.Load() {
					t.Errorf("body %d (%s) read after its close", i, b.name)
				}
			}
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func r114Fast(opts ...retrypolicy.Option) *retrypolicy.Policy {
	return retrypolicy.New(append([]retrypolicy.Option{retrypolicy.BaseDelay(time.Millisecond), retrypolicy.MaxDelay(2 * time.Millisecond)}, opts...)...)
}

// 503 then 200: the first attempt sends Body, the retry a copy; each is
// closed once, and the server gets the whole body on both.
func TestReview114_BodyRetryClosesOnce(t *testing.T) {
	payload := bytes.Repeat([]byte("x"), 100<<10)
	var n atomic.Int32
	var bad atomic.Int32
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if !bytes.Equal(b, payload) {
			bad.Add(1)
		}
		if n.Add(1) == 1 {
			w.WriteHeader(503)
		}
	}))
	defer s.Close()
	rq := &r114Req{}
	hc := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(pipeline.New(pipeline.WithRetry(r114Fast()))))}
	resp, err := hc.Do(rq.new("PUT", s.URL, payload))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("err %v resp %v", err, resp)
	}
	resp.Body.Close()
	if bad.Load() != 0 {
		t.Errorf("%d attempts got a wrong body", bad.Load())
	}
	if n.Load() != 2 || rq.gets.Load() != 1 {
		t.Errorf("attempts %d, GetBody calls %d; want 2 and 1", n.Load(), rq.gets.Load())
	}
	rq.check(t)
}

// A server that answers 503 at once, without reading the body, while
// net/http still writes it: the retry must not read the caller's Body
// (net/http's writer may still be reading it), and every body is closed
// once.
func TestReview114_BodyEarlyAnswerRetry(t *testing.T) {
	payload := bytes.Repeat([]byte("y"), 4<<20)
	var n atomic.Int32
	var bad atomic.Int32
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) <= 2 {
			w.Header().Set("Connection", "close")
			w.WriteHeader(503)
			return
		}
		b, _ := io.ReadAll(r.Body)
		if !bytes.Equal(b, payload) {
			bad.Add(1)
		}
	}))
	defer s.Close()
	for i := range 5 {
		n.Store(0)
		rq := &r114Req{}
		hc := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(pipeline.New(pipeline.WithRetry(r114Fast()))))}
		resp, err := hc.Do(rq.new("PUT", s.URL, payload))
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("run %d: err %v resp %v", i, err, resp)
		}
		resp.Body.Close()
		rq.check(t)
	}
	if bad.Load() != 0 {
		t.Errorf("%d attempts got a wrong body", bad.Load())
	}
}

// A breaker open: nothing sent, the caller's Body closed once, GetBody
// never called.
func TestReview114_BodyBreakerRejects(t *testing.T) {
	b := breaker.New("x", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(time.Hour))
	b.Execute(t.Context(), func(context.Context) error { return errors.New("boom") })
	if b.Check() == nil {
		t.Fatal("breaker not open")
	}
	rq := &r114Req{}
	hc := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(pipeline.New(pipeline.WithBreaker(b), pipeline.WithRetry(r114Fast()))))}
	_, err := hc.Do(rq.new("PUT", "http://127.0.0.1:1/", []byte("abc")))
	if !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("err %v", err)
	}
	if rq.gets.Load() != 0 {
		t.Errorf("GetBody called %d times", rq.gets.Load())
	}
	rq.check(t)
}

// Hedging: the first attempt is slow, a hedge twins it: the two must not
// read one reader, the server gets the whole body on each, and every
// body is closed once.
func TestReview114_BodyHedge(t *testing.T) {
	payload := bytes.Repeat([]byte("h"), 256<<10)
	var n atomic.Int32
	var bad atomic.Int32
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		first := n.Add(1) == 1
		b, _ := io.ReadAll(r.Body)
		if !bytes.Equal(b, payload) {
			bad.Add(1)
		}
		if first {
			select {
			case <-r.Context().Done():
			case <-time.After(2 * time.Second):
			}
		}
	}))
	defer s.Close()
	for i := range 5 {
		n.Store(0)
		rq := &r114Req{}
		p := pipeline.New(pipeline.WithRetry(r114Fast()), pipeline.WithHedging(hedge.New(hedge.Delay(20*time.Millisecond), hedge.MaxShare(1))))
		hc := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(p))}
		start := time.Now()
		resp, err := hc.Do(rq.new("PUT", s.URL, payload))
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("run %d: err %v resp %v", i, err, resp)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if d := time.Since(start); d > time.Second {
			t.Errorf("run %d: took %v: the hedge did not win", i, d)
		}
		rq.check(t)
	}
	if bad.Load() != 0 {
		t.Errorf("%d attempts got a wrong body", bad.Load())
	}
}

// The server reads half the body, then cuts the connection; the retry must
// send the whole body.
func TestReview114_BodyHalfReadThenRetry(t *testing.T) {
	payload := bytes.Repeat([]byte("z"), 1<<20)
	var n atomic.Int32
	var good atomic.Int32
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			io.CopyN(io.Discard, r.Body, 300<<10)
			c, _, _ := http.NewResponseController(w).Hijack()
			c.Close()
			return
		}
		b, _ := io.ReadAll(r.Body)
		if bytes.Equal(b, payload) {
			good.Add(1)
		}
	}))
	defer s.Close()
	rq := &r114Req{}
	hc := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(pipeline.New(pipeline.WithRetry(r114Fast()))))}
	resp, err := hc.Do(rq.new("PUT", s.URL, payload))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("err %v resp %v", err, resp)
	}
	resp.Body.Close()
	if good.Load() != 1 {
		t.Errorf("server got the whole body %d times", good.Load())
	}
	rq.check(t)
}

// GetBody set, Body http.NoBody (or nil): as net/http, no body is sent,
// and the call succeeds.
func TestReview114_BodyNoBodyWithGetBody(t *testing.T) {
	var got atomic.Int64
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got.Add(int64(len(b)))
	}))
	defer s.Close()
	for _, body := range []io.ReadCloser{http.NoBody, nil} {
		for _, rt := range []http.RoundTripper{http.DefaultTransport, httpclient.NewTransport()} {
			got.Store(0)
			req, _ := http.NewRequest("PUT", s.URL, nil)
			req.Body = body
			var gets atomic.Int32
			req.GetBody = func() (io.ReadCloser, error) { gets.Add(1); return io.NopCloser(strings.NewReader("abc")), nil }
			resp, err := (&http.Client{Transport: rt}).Do(req)
			if err != nil {
				t.Fatalf("%T %v: %v", rt, body, err)
			}
			resp.Body.Close()
			if got.Load() != 0 || gets.Load() != 0 {
				t.Errorf("%T body %v: server got %d bytes, GetBody %d calls", rt, body, got.Load(), gets.Load())
			}
		}
	}
}

// 503, retry 307, then the redirected request: the server gets the whole
// body at each hop, every body is closed once.
func TestReview114_BodyRetryThenRedirect(t *testing.T) {
	payload := bytes.Repeat([]byte("r"), 64<<10)
	var n atomic.Int32
	var bad atomic.Int32
	var hops atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("/a", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if !bytes.Equal(b, payload) {
			bad.Add(1)
		}
		if n.Add(1) == 1 {
			w.WriteHeader(503)
			return
		}
		http.Redirect(w, r, "/b", http.StatusTemporaryRedirect)
	})
	mux.HandleFunc("/b", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if !bytes.Equal(b, payload) {
			bad.Add(1)
		}
		hops.Add(1)
	})
	s := httptest.NewServer(mux)
	defer s.Close()
	// Plain net/http, its first answer a 307 (n starts at 1).
	n.Store(1)
	rq := &r114Req{}
	resp, err := http.DefaultClient.Do(rq.new("PUT", s.URL+"/a", payload))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("plain: err %v resp %v", err, resp)
	}
	resp.Body.Close()
	plainCloses := rq.bodies[0].closes.Load() // 2: the Transport's and the Client's
	rq.checkFirst(t, plainCloses)
	hops.Store(0)
	n.Store(0)
	hc := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(pipeline.New(pipeline.WithRetry(r114Fast()))))}
	rq = &r114Req{}
	resp, err = hc.Do(rq.new("PUT", s.URL+"/a", payload))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("err %v resp %v", err, resp)
	}
	resp.Body.Close()
	if bad.Load() != 0 || hops.Load() != 1 {
		t.Errorf("bad bodies %d, hops %d", bad.Load(), hops.Load())
	}
	rq.checkFirst(t, plainCloses)
}

// Expect: 100-continue answered with a 503 (body not sent), then 200.
func TestReview114_BodyExpectContinue(t *testing.T) {
	payload := bytes.Repeat([]byte("e"), 64<<10)
	var n atomic.Int32
	var bad atomic.Int32
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			w.WriteHeader(503)
			return
		}
		b, _ := io.ReadAll(r.Body)
		if !bytes.Equal(b, payload) {
			bad.Add(1)
		}
	}))
	defer s.Close()
	base := &http.Transport{ExpectContinueTimeout: time.Second}
	defer base.CloseIdleConnections()
	for i := range 3 {
		n.Store(0)
		rq := &r114Req{}
		hc := &http.Client{Transport: httpclient.NewTransport(httpclient.Base(base), httpclient.WithPipeline(pipeline.New(pipeline.WithRetry(r114Fast()))))}
		req := rq.new("PUT", s.URL, payload)
		req.Header.Set("Expect", "100-continue")
		resp, err := hc.Do(req)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("run %d: err %v resp %v", i, err, resp)
		}
		resp.Body.Close()
		rq.check(t)
	}
	if bad.Load() != 0 {
		t.Errorf("bad bodies %d", bad.Load())
	}
}

// WaitWhenOpen: the call waits for the open breaker, then is sent: the
// server gets the body whole, once; every body closed once; the key
// header the same on each attempt.
func TestReview114_BodyWaitWhenOpenAndKey(t *testing.T) {
	payload := bytes.Repeat([]byte("w"), 32<<10)
	var n atomic.Int32
	var bad atomic.Int32
	var keys sync.Map
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		keys.Store(r.Header.Get("Idempotency-Key"), true)
		b, _ := io.ReadAll(r.Body)
		if !bytes.Equal(b, payload) {
			bad.Add(1)
		}
		if n.Add(1) == 1 {
			w.WriteHeader(503)
		}
	}))
	defer s.Close()
	b := breaker.New("w", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(30*time.Millisecond))
	b.Execute(t.Context(), func(context.Context) error { return errors.New("boom") })
	p := pipeline.New(pipeline.WithBreaker(b), pipeline.WaitWhenOpen(), pipeline.WithRetry(r114Fast()), pipeline.WithTimeBudget(2*time.Second))
	hc := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(p), httpclient.AutoIdempotencyKey())}
	rq := &r114Req{}
	resp, err := hc.Do(rq.new("POST", s.URL, payload))
	if err != nil {
		t.Fatalf("err %v", err)
	}
	resp.Body.Close()
	nk := 0
	keys.Range(func(k, v any) bool { nk++; return true })
	t.Logf("attempts %d, status %d, keys %d", n.Load(), resp.StatusCode, nk)
	if bad.Load() != 0 || nk != 1 {
		t.Errorf("bad bodies %d, distinct keys %d", bad.Load(), nk)
	}
	rq.check(t)
}
