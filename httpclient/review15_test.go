package httpclient_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/deadline"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/retrysignal"
)

// A hedged request whose hedge answers 503 before the first attempt answers
// 503: a plain client would hand back a 503 response; the Transport should
// hand back the last answer "as it came".
func TestReview15HedgedBoth503ReturnsResponse(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			time.Sleep(150 * time.Millisecond) // the first attempt: slow
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, "busy")
	}))
	defer srv.Close()
	p := pipeline.New(pipeline.WithHedging(hedge.New(hedge.Delay(20*time.Millisecond), hedge.MaxShare(1))))
	hc := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(p))}
	resp, err := hc.Get(srv.URL)
	if err != nil {
		t.Fatalf("err %v, want the 503 response (n=%d)", err, n.Load())
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 503 || string(b) != "busy" {
		t.Fatalf("status %d body %q", resp.StatusCode, b)
	}
}

// Hedge answers 500 (not retried) first, the first attempt 503 later.
func TestReview15HedgedTerminalThen503ReturnsResponse(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			time.Sleep(150 * time.Millisecond)
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusInternalServerError)
		io.WriteString(w, "boom")
	}))
	defer srv.Close()
	p := pipeline.New(pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(1))),
		pipeline.WithHedging(hedge.New(hedge.Delay(20*time.Millisecond), hedge.MaxShare(1))))
	hc := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(p))}
	resp, err := hc.Get(srv.URL)
	if err != nil {
		t.Fatalf("err %v, want a response (n=%d)", err, n.Load())
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	t.Logf("status %d body %q", resp.StatusCode, b)
}

// MaxBufferedBody(math.MaxInt64): "buffer everything" must not send an
// empty body.
func TestReview15MaxBufferedBodyMaxInt64(t *testing.T) {
	var got []string
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, string(b))
		mu.Unlock()
	}))
	defer srv.Close()
	hc := &http.Client{Transport: httpclient.NewTransport(httpclient.MaxBufferedBody(math.MaxInt64))}
	body := struct{ io.Reader }{strings.NewReader("hello world")} // no GetBody
	req, _ := http.NewRequest(http.MethodPut, srv.URL, body)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if len(got) != 1 || got[0] != "hello world" {
		t.Fatalf("server got %q", got)
	}
}

// MaxErrorBody(math.MaxInt): the Client should still keep the error body.
func TestReview15MaxErrorBodyMaxInt(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, "no such order")
	}))
	defer srv.Close()
	c := httpclient.New(httpclient.MaxErrorBody(math.MaxInt))
	err := c.GetJSON(context.Background(), srv.URL, nil)
	var se *httpclient.StatusError
	if !errors.As(err, &se) {
		t.Fatalf("err %v", err)
	}
	if string(se.Body) != "no such order" {
		t.Fatalf("Body %q Truncated %v", se.Body, se.Truncated)
	}
}

// retrysignal.Handler must not hide the ResponseWriter's http.Flusher from
// a streaming handler.
func TestReview15RetrysignalHandlerKeepsFlusher(t *testing.T) {
	h := retrysignal.Handler(func(w http.ResponseWriter, r *http.Request) error {
		f, ok := w.(http.Flusher)
		if !ok {
			http.Error(w, "streaming unsupported", http.StatusInternalServerError)
			return nil
		}
		io.WriteString(w, "data: 1\n\n")
		f.Flush()
		return nil
	})
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
}

var _ = bytes.NewReader

func r15Fast() *pipeline.Pipeline {
	return pipeline.New(pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond), retrypolicy.MaxDelay(5*time.Millisecond))))
}

// POST without a key; the server reads it whole, then closes the connection
// without answering: it must be sent once.
func TestReview15PostLostResponseSentOnce(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		t.Run("h2="+strconv.FormatBool(h2), func(t *testing.T) {
			var n atomic.Int32
			srv, base := r15Start(t, h2, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.ReadAll(r.Body)
				n.Add(1)
				if h2 {
					panic(http.ErrAbortHandler)
				}
				c, _, _ := http.NewResponseController(w).Hijack()
				c.Close()
			}), 0)
			defer srv.Close()
			hc := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(r15Fast()), httpclient.Base(base))}
			for _, body := range []io.Reader{strings.NewReader("x"), struct{ io.Reader }{strings.NewReader("x")}, nil} {
				n.Store(0)
				req, _ := http.NewRequest(http.MethodPost, srv.URL, body)
				resp, err := hc.Do(req)
				if err == nil {
					resp.Body.Close()
				}
				if n.Load() != 1 {
					t.Errorf("body %T: sent %d times (err %v)", body, n.Load(), err)
				}
			}
		})
	}
}

// A server that reads half the body and answers 503: every attempt of a PUT
// carries the whole body.
func TestReview15HalfReadThen503WholeBodyEachAttempt(t *testing.T) {
	payload := strings.Repeat("abcdefgh", 64<<10) // 512 KiB
	for _, h2 := range []bool{false, true} {
		t.Run("h2="+strconv.FormatBool(h2), func(t *testing.T) {
			var mu sync.Mutex
			var lens []int
			var n atomic.Int32
			srv, base := r15Start(t, h2, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if n.Add(1) < 3 {
					buf := make([]byte, len(payload)/2)
					io.ReadFull(r.Body, buf)
					w.WriteHeader(http.StatusServiceUnavailable)
					return
				}
				b, _ := io.ReadAll(r.Body)
				mu.Lock()
				lens = append(lens, len(b))
				mu.Unlock()
				if string(b) != payload {
					w.WriteHeader(http.StatusBadRequest)
				}
			}), 0)
			defer srv.Close()
			hc := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(r15Fast()), httpclient.Base(base))}
			for i, mk := range []func() io.Reader{
				func() io.Reader { return strings.NewReader(payload) },
				func() io.Reader { return struct{ io.Reader }{strings.NewReader(payload)} },
			} {
				n.Store(0)
				req, _ := http.NewRequest(http.MethodPut, srv.URL, mk())
				resp, err := hc.Do(req)
				if err != nil {
					t.Errorf("%d: err %v", i, err)
					continue
				}
				resp.Body.Close()
				if resp.StatusCode != 200 {
					t.Errorf("%d: status %d lens %v", i, resp.StatusCode, lens)
				}
			}
		})
	}
}

// Expect: 100-continue; the server answers 503 without reading the body.
func TestReview15Expect100Continue503(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) < 3 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		b, _ := io.ReadAll(r.Body)
		if string(b) != "payload" {
			w.WriteHeader(http.StatusBadRequest)
		}
	}))
	defer srv.Close()
	base := &http.Transport{ExpectContinueTimeout: time.Second}
	hc := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(r15Fast()), httpclient.Base(base))}
	req, _ := http.NewRequest(http.MethodPut, srv.URL, struct{ io.Reader }{strings.NewReader("payload")})
	req.Header.Set("Expect", "100-continue")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d after %d", resp.StatusCode, n.Load())
	}
}

// Request-Timeout-Ms is never more than the time left, and positive while
// time is left.
func TestReview15DeadlineHeaderBound(t *testing.T) {
	var mu sync.Mutex
	var vals []string
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		vals = append(vals, r.Header.Get(deadline.Header))
		mu.Unlock()
		if n.Add(1) < 3 {
			w.WriteHeader(503)
		}
	}))
	defer srv.Close()
	p := pipeline.New(pipeline.WithTimeBudget(300*time.Millisecond), pipeline.WithAttemptTimeout(100*time.Millisecond),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(time.Millisecond), retrypolicy.MaxDelay(2*time.Millisecond))))
	hc := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(p))}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
	req.Header.Set(deadline.Header, "999999") // a stale one of the caller's
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	for _, v := range vals {
		ms, err := strconv.Atoi(v)
		if err != nil || ms > 50 || ms <= 0 {
			t.Errorf("header %q", v)
		}
	}
	t.Logf("%v", vals)
}

// deadline.Middleware with malformed values.
func TestReview15DeadlineMiddleware(t *testing.T) {
	cases := map[string]string{
		"-5": "none", "0": "none", "1e3": "none", "999999999": "long", "9999999999": "none",
		" 100 ": "100", "+100": "none", "0x10": "none", "100,200": "none", "١٢٣": "none",
	}
	for v, want := range cases {
		var got string
		h := deadline.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			dl, ok := r.Context().Deadline()
			switch {
			case !ok:
				got = "none"
			case r.Context().Err() != nil:
				got = "expired"
			case time.Until(dl) > 24*time.Hour:
				got = "long"
			default:
				got = strconv.Itoa(int((time.Until(dl) + 50*time.Millisecond) / (100 * time.Millisecond) * 100))
			}
		}))
		req := httptest.NewRequest("GET", "/", nil)
		req.Header.Set(deadline.Header, v)
		h.ServeHTTP(httptest.NewRecorder(), req)
		if got != want {
			t.Errorf("%q: got %s want %s", v, got, want)
		}
	}
}

// 307 with a body through the Client, and a 303.
func TestReview15Redirect307Body(t *testing.T) {
	var mu sync.Mutex
	var got []string
	mux := http.NewServeMux()
	mux.HandleFunc("/a", func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		http.Redirect(w, r, "/b", http.StatusTemporaryRedirect)
	})
	mux.HandleFunc("/b", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, r.Method+" "+string(b))
		mu.Unlock()
		w.Write([]byte("{}"))
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	c := httpclient.New(httpclient.WithPipeline(r15Fast()))
	if err := c.PutJSON(context.Background(), srv.URL+"/a", map[string]int{"a": 1}, nil); err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(r15Fast()))}
	req, _ := http.NewRequest("PUT", srv.URL+"/a", bytes.NewReader([]byte("raw")))
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if len(got) != 2 || got[0] != `PUT {"a":1}` || got[1] != "PUT raw" {
		t.Fatalf("%q", got)
	}
}

var _ = tls.Config{}
var _ net.Conn

// Hedged requests with bodies, losers slow: all connections come back,
// nothing leaks, each attempt whose body came whole got the right one.
// An attempt cancelled as its body was sent (a hedge that lost while a
// loaded machine was still writing it; CI, once) ends the server's read
// early with an error: that is not a wrong body.
func TestReview15HedgeLosersClosedNoLeak(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var active atomic.Int32
	var bad, cut atomic.Int32
	var n atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		switch {
		case err != nil:
			cut.Add(1)
			return
		case string(b) != "payload":
			bad.Add(1)
		}
		if n.Add(1)%2 == 1 {
			select {
			case <-r.Context().Done():
				return
			case <-time.After(300 * time.Millisecond):
			}
		}
		io.WriteString(w, strings.Repeat("x", 10000))
	}))
	srv.Config.ConnState = func(c net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			active.Add(1)
		case http.StateClosed, http.StateHijacked:
			active.Add(-1)
		}
	}
	srv.Start()
	defer srv.Close()
	tr := &http.Transport{MaxIdleConnsPerHost: 100}
	defer tr.CloseIdleConnections()
	p := pipeline.New(pipeline.WithRetry(retrypolicy.New()), pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxShare(1))))
	hc := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(p), httpclient.Base(tr))}
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest(http.MethodPut, srv.URL, strings.NewReader("payload"))
			resp, err := hc.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}()
	}
	wg.Wait()
	time.Sleep(100 * time.Millisecond)
	tr.CloseIdleConnections()
	deadline := time.Now().Add(2 * time.Second)
	for active.Load() != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if a := active.Load(); a != 0 {
		t.Errorf("%d connections still held after CloseIdleConnections", a)
	}
	if bad.Load() != 0 {
		t.Errorf("%d attempts got a bad body", bad.Load())
	}
	t.Logf("requests %d, bodies cut short %d", n.Load(), cut.Load())
}

// Retry-After values.
func TestReview15RetryAfter(t *testing.T) {
	cases := []struct {
		v       string
		minWait time.Duration
		maxWait time.Duration
	}{
		{"1", 900 * time.Millisecond, 1500 * time.Millisecond},
		{"0", 0, 300 * time.Millisecond},
		{"-1", 0, 300 * time.Millisecond},
		{"abc", 0, 300 * time.Millisecond},
		{time.Now().Add(-time.Hour).UTC().Format(http.TimeFormat), 0, 300 * time.Millisecond},
	}
	for _, c := range cases {
		var n atomic.Int32
		var second time.Time
		var first time.Time
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if n.Add(1) == 1 {
				first = time.Now()
				w.Header().Set("Retry-After", c.v)
				w.WriteHeader(503)
				return
			}
			second = time.Now()
		}))
		p := pipeline.New(pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(time.Millisecond), retrypolicy.MaxDelay(5*time.Second))))
		hc := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(p))}
		resp, err := hc.Get(srv.URL)
		if err != nil {
			t.Errorf("%q: %v", c.v, err)
		} else {
			resp.Body.Close()
			if w := second.Sub(first); w < c.minWait || w > c.maxWait {
				t.Errorf("%q: waited %v", c.v, w)
			}
		}
		srv.Close()
	}
}

// Huge Retry-After with a short budget: the 503 comes back at once.
func TestReview15RetryAfterPastBudget(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", time.Now().Add(time.Hour).UTC().Format(http.TimeFormat))
		w.WriteHeader(503)
	}))
	defer srv.Close()
	p := pipeline.New(pipeline.WithTimeBudget(time.Second), pipeline.WithRetry(retrypolicy.New()))
	hc := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(p))}
	start := time.Now()
	resp, err := hc.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 || time.Since(start) > 500*time.Millisecond {
		t.Fatalf("status %d after %v", resp.StatusCode, time.Since(start))
	}
}

// The caller cancels mid-backoff: returns at once, with the context's
// error, no leak; the breaker counts the 503 the dependency answered
// before (a caller who hangs up in the backoff leaves a dead dependency's
// breaker closed otherwise, review127), not the cancellation.
func TestReview15CancelMidBackoff(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "5")
		w.WriteHeader(503)
	}))
	defer srv.Close()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	b := breaker.New("x", breaker.ConsecutiveFailures(1))
	p := pipeline.New(pipeline.WithBreaker(b), pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxDelay(10*time.Second))))
	hc := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(p), httpclient.Base(tr))}
	ctx, cancel := context.WithCancelCause(context.Background())
	time.AfterFunc(100*time.Millisecond, func() { cancel(errors.New("user went away")) })
	start := time.Now()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
	resp, err := hc.Do(req)
	if err == nil {
		resp.Body.Close()
		t.Fatal("no error")
	}
	if time.Since(start) > time.Second {
		t.Errorf("took %v", time.Since(start))
	}
	if b.State() != resilience.StateOpen {
		t.Errorf("breaker %v: want the 503 counted: %v", b.State(), err)
	}
	t.Logf("err %v", err)
}

// The caller cancels (with a cause) while the server hangs: never counted.
func TestReview15CancelCauseMidAttempt(t *testing.T) {
	for _, method := range []string{"GET", "POST"} {
		stop := make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-stop:
			}
		}))
		b := breaker.New("x", breaker.ConsecutiveFailures(1))
		p := pipeline.New(pipeline.WithBreaker(b), pipeline.WithRetry(retrypolicy.New()))
		hc := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(p))}
		ctx, cancel := context.WithCancelCause(context.Background())
		time.AfterFunc(50*time.Millisecond, func() { cancel(errors.New("user went away")) })
		req, _ := http.NewRequestWithContext(ctx, method, srv.URL, nil)
		resp, err := hc.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		if b.State() != resilience.StateClosed {
			t.Errorf("%s: breaker %v after a cancellation: %v", method, b.State(), err)
		}
		t.Logf("%s: %v", method, err)
		close(stop)
		srv.Close()
	}
}

// A caller's deadline (with a cause) while the server hangs, and hedging.
func TestReview15TimeoutCauseHedged(t *testing.T) {
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-stop:
		}
	}))
	defer srv.Close()
	defer close(stop)
	p := pipeline.New(pipeline.WithRetry(retrypolicy.New()), pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxShare(1))))
	hc := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(p))}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
	resp, err := hc.Do(req)
	if err == nil {
		resp.Body.Close()
	}
	if time.Since(start) > 400*time.Millisecond {
		t.Errorf("took %v", time.Since(start))
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err %v", err)
	}
}

func r15Start(t *testing.T, h2 bool, h http.Handler, maxHeader int) (*httptest.Server, *http.Transport) {
	srv := httptest.NewUnstartedServer(h)
	if maxHeader > 0 {
		srv.Config.MaxHeaderBytes = maxHeader
	}
	if h2 {
		srv.EnableHTTP2 = true
		srv.StartTLS()
		return srv, srv.Client().Transport.(*http.Transport)
	}
	srv.Start()
	return srv, &http.Transport{}
}

type r15FailReader struct{ n int }

func (r *r15FailReader) Read(p []byte) (int, error) {
	if r.n > 0 {
		r.n--
		p[0] = 'x'
		return 1, nil
	}
	return 0, errors.New("disk on fire")
}

// The caller's own errors: one attempt, breaker unmoved.
func TestReview15CallerErrorsNotCounted(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		t.Run("h2="+strconv.FormatBool(h2), func(t *testing.T) {
			var n atomic.Int32
			var round atomic.Int64 // counted: requests of this round only, not a late handler of the one before
			srv, base := r15Start(t, h2, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Header.Get("X-Round") == strconv.FormatInt(round.Load(), 10) {
					n.Add(1)
				}
				io.ReadAll(r.Body)
				if r.URL.Path == "/bighdr" {
					w.Header().Set("X-Big", strings.Repeat("y", 64<<10))
				}
			}), 4096)
			defer srv.Close()
			base.MaxResponseHeaderBytes = 8 << 10
			cases := []struct {
				name string
				mk   func() *http.Request
			}{
				{"POST failing body", func() *http.Request {
					r, _ := http.NewRequest("POST", srv.URL, &r15FailReader{n: 3})
					return r
				}},
				{"PUT failing GetBody body", func() *http.Request {
					r, _ := http.NewRequest("PUT", srv.URL, strings.NewReader("abc"))
					r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(&r15FailReader{n: 3}), nil }
					r.ContentLength = -1
					return r
				}},
				{"PUT failing GetBody", func() *http.Request {
					r, _ := http.NewRequest("PUT", srv.URL, strings.NewReader("abc"))
					r.GetBody = func() (io.ReadCloser, error) { return nil, errors.New("cannot rewind") }
					return r
				}},
				{"request header too large", func() *http.Request {
					r, _ := http.NewRequest("GET", srv.URL, nil)
					r.Header.Set("X-Big", strings.Repeat("z", 64<<10))
					return r
				}},
				{"response header too large", func() *http.Request {
					r, _ := http.NewRequest("GET", srv.URL+"/bighdr", nil)
					return r
				}},
			}
			// A connection whose SETTINGS arrived: sent on a new one before
			// they do, a request header list over the server's limit ends
			// the connection (GOAWAY), which the client cannot tell from a
			// server's fault (docs/retries.md).
			warm, err := (&http.Client{Transport: base}).Get(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			warm.Body.Close()
			for _, c := range cases {
				if h2 && c.name == "response header too large" {
					continue // HTTP/2 ends the connection: counted (TestReview16BrokenHPACKFromServerCounts)
				}
				// What a plain client makes of it: net/http's HTTP/2
				// transport sends a request again on a new connection after
				// some connection errors, on its own.
				mk := func() *http.Request {
					r := c.mk()
					r.Header.Set("X-Round", strconv.FormatInt(round.Load(), 10))
					return r
				}
				round.Add(1)
				n.Store(0)
				if resp, err := (&http.Client{Transport: base}).Do(mk()); err == nil {
					resp.Body.Close()
				}
				time.Sleep(10 * time.Millisecond) // the handlers of the plain client's requests end
				plain := max(n.Load(), 1)
				round.Add(1)
				n.Store(0)
				b := breaker.New("x", breaker.ConsecutiveFailures(1))
				p := pipeline.New(pipeline.WithBreaker(b), pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(1), retrypolicy.MaxDelay(1))))
				hc := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(p), httpclient.Base(base))}
				resp, err := hc.Do(mk())
				status := 0
				if err == nil {
					status = resp.StatusCode
					resp.Body.Close()
				}
				time.Sleep(10 * time.Millisecond)
				if b.State() != resilience.StateClosed || n.Load() > plain {
					t.Errorf("%s: breaker %v, server saw %d (a plain client's: %d), status %d, err %v", c.name, b.State(), n.Load(), plain, status, err)
				} else {
					t.Logf("%s: ok: status %d err %v", c.name, status, err)
				}
			}
		})
	}
}

// HTTP/2 refuses some of the caller's headers before anything is sent: the
// caller's error, not the dependency's.
func TestReview15H2InvalidConnHeadersNotCounted(t *testing.T) {
	var n atomic.Int32
	srv, base := r15Start(t, true, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { n.Add(1) }), 0)
	defer srv.Close()
	for _, h := range [][2]string{{"Connection", "Upgrade"}, {"Upgrade", "websocket"}, {"Transfer-Encoding", "gzip"}} {
		n.Store(0)
		b := breaker.New("x", breaker.ConsecutiveFailures(1))
		p := pipeline.New(pipeline.WithBreaker(b), pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(1), retrypolicy.MaxDelay(1))))
		hc := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(p), httpclient.Base(base))}
		req, _ := http.NewRequest("GET", srv.URL, nil)
		req.Header.Set(h[0], h[1])
		resp, err := hc.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		if b.State() != resilience.StateClosed {
			t.Errorf("%s: %s: breaker %v, server saw %d, err %v", h[0], h[1], b.State(), n.Load(), err)
		}
	}
}

// A 503 whose body trickles and never ends: the retry must not wait on it,
// nor, with an attempt timeout, spend the next attempt's time on it.
func TestReview15StuckErrorBody(t *testing.T) {
	for name, p := range map[string]*pipeline.Pipeline{
		"budget of the caller's": pipeline.New(pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(time.Millisecond), retrypolicy.MaxDelay(2*time.Millisecond)))),
		"attempt timeout": pipeline.New(pipeline.WithAttemptTimeout(300*time.Millisecond),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(2), retrypolicy.BaseDelay(time.Millisecond), retrypolicy.MaxDelay(2*time.Millisecond)))),
	} {
		t.Run(name, func(t *testing.T) {
			var n atomic.Int32
			release := make(chan struct{})
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if n.Add(1) == 1 {
					w.WriteHeader(http.StatusServiceUnavailable)
					io.WriteString(w, "overloaded, ")
					w.(http.Flusher).Flush()
					select { // a stuck proxy: the rest never comes
					case <-r.Context().Done():
					case <-release:
					}
					return
				}
				io.WriteString(w, "ok")
			}))
			defer srv.Close()
			defer close(release)
			hc := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(p))}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			start := time.Now()
			req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatalf("after %v, server saw %d: %v", time.Since(start), n.Load(), err)
			}
			resp.Body.Close()
			if time.Since(start) > time.Second {
				t.Fatalf("the retry waited %v on the 503's body", time.Since(start))
			}
		})
	}
}

// Many goroutines on one Client: bodies whole, keys stable, POSTs without a
// key once, no leak.
func TestReview15SharedClientStress(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var mu sync.Mutex
	seen := map[string]int{} // by request id: deliveries
	var bad, cut atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		id := r.Header.Get("X-Id")
		if err != nil {
			cut.Add(1) // a hedge that lost, cancelled while it sent its body
			return
		}
		if r.Method != "GET" && string(b) != "body-"+id {
			bad.Add(1)
		}
		mu.Lock()
		seen[r.Method+id]++
		mu.Unlock()
		switch rand.IntN(4) {
		case 0:
			w.WriteHeader(503)
			io.WriteString(w, strings.Repeat("e", rand.IntN(5000)))
		case 1:
			time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond)
			fallthrough
		default:
			io.WriteString(w, "{}")
		}
	}))
	defer srv.Close()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	p := pipeline.New(pipeline.WithBreaker(breaker.New("s", breaker.ConsecutiveFailures(1000))), pipeline.WithTimeBudget(2*time.Second),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(time.Millisecond), retrypolicy.MaxDelay(3*time.Millisecond))),
		pipeline.WithHedging(hedge.New(hedge.Delay(5*time.Millisecond), hedge.MaxShare(0.5))))
	c := httpclient.New(httpclient.WithPipeline(p), httpclient.Base(tr))
	hc := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(p), httpclient.Base(tr))}
	var wg sync.WaitGroup
	var posts sync.Map
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 15; i++ {
				id := fmt.Sprintf("%d-%d", g, i)
				switch i % 3 {
				case 0:
					_ = c.GetJSON(context.Background(), srv.URL, nil, httpclient.Header("X-Id", id))
				case 1:
					req, _ := http.NewRequest("POST", srv.URL, struct{ io.Reader }{strings.NewReader("body-" + id)})
					req.Header.Set("X-Id", id)
					posts.Store("POST"+id, true)
					if resp, err := hc.Do(req); err == nil {
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}
				case 2:
					req, _ := http.NewRequest("PUT", srv.URL, struct{ io.Reader }{strings.NewReader("body-" + id)})
					req.Header.Set("X-Id", id)
					if resp, err := hc.Do(req); err == nil {
						resp.Body.Close() // unread
					}
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("attempts whose body was cut off: %d", cut.Load())
	if bad.Load() != 0 {
		t.Errorf("%d attempts with a bad body", bad.Load())
	}
	mu.Lock()
	for k, v := range seen {
		if _, ok := posts.Load(k); ok && v != 1 {
			t.Errorf("%s delivered %d times", k, v)
		}
	}
	mu.Unlock()
	time.Sleep(200 * time.Millisecond)
}

func TestReview15Chain(t *testing.T) {
	var cHits atomic.Int32
	var cHealthy atomic.Bool
	c := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cHits.Add(1)
		if cHealthy.Load() {
			io.WriteString(w, `{"ok":true}`)
			return
		}
		w.WriteHeader(503)
	}))
	defer c.Close()
	fast := func() *pipeline.Pipeline {
		return pipeline.New(pipeline.WithTimeBudget(2*time.Second), pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(time.Millisecond), retrypolicy.MaxDelay(2*time.Millisecond))))
	}
	bc := httpclient.New(httpclient.WithPipeline(fast()))
	var bAttempts []string
	b := httptest.NewServer(deadline.Middleware(retrysignal.Middleware(retrysignal.Handler(func(w http.ResponseWriter, r *http.Request) error {
		a, _ := retrysignal.FromContext(r.Context())
		bAttempts = append(bAttempts, a.String())
		var out map[string]any
		if err := bc.GetJSON(r.Context(), c.URL, &out); err != nil {
			return err
		}
		io.WriteString(w, `{"b":true}`)
		return nil
	}))))
	defer b.Close()
	ac := httpclient.New(httpclient.WithPipeline(fast()))
	err := ac.GetJSON(context.Background(), b.URL, nil)
	var se *httpclient.StatusError
	if !errors.As(err, &se) || se.StatusCode != 503 {
		t.Fatalf("err %v", err)
	}
	if cHits.Load() != 4 || len(bAttempts) != 1 {
		t.Fatalf("C hit %d times, B attempts %v", cHits.Load(), bAttempts)
	}
	cHealthy.Store(true)
	if err := ac.GetJSON(context.Background(), b.URL, nil); err != nil {
		t.Fatalf("healthy chain: %v", err)
	}
}

// A streamed answer of a hedged call, read whole after RoundTrip returned,
// whichever twin won.
func TestReview15HedgedStreaming(t *testing.T) {
	for _, firstWins := range []bool{true, false} {
		var n atomic.Int32
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			i := n.Add(1)
			wait := 60 * time.Millisecond
			if (i == 1) != firstWins {
				wait = 400 * time.Millisecond
			}
			select {
			case <-time.After(wait):
			case <-r.Context().Done():
				return
			}
			for j := 0; j < 10; j++ {
				io.WriteString(w, "chunk;")
				w.(http.Flusher).Flush()
				time.Sleep(20 * time.Millisecond)
			}
		}))
		p := pipeline.New(pipeline.WithRetry(retrypolicy.New()), pipeline.WithAttemptTimeout(time.Second),
			pipeline.WithHedging(hedge.New(hedge.Delay(20*time.Millisecond), hedge.MaxShare(1))))
		hc := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(p))}
		resp, err := hc.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || len(b) != 60 {
			t.Errorf("firstWins=%v: read %d bytes, err %v", firstWins, len(b), err)
		}
		srv.Close()
	}
}

func TestReview15ZeroTransportAndClient(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "{}") }))
	defer srv.Close()
	hc := &http.Client{Transport: &httpclient.Transport{}}
	resp, err := hc.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var c httpclient.Client
	if err := c.GetJSON(t.Context(), srv.URL, nil); err != nil {
		t.Fatal(err)
	}
}
