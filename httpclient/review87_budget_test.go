package httpclient_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/deadline"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

func review87Pipe(opts ...pipeline.Option) *pipeline.Pipeline {
	if len(opts) == 0 {
		opts = []pipeline.Option{pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond)))}
	}
	return pipeline.New(opts...)
}

// Idle keep-alive race: the server closes a reused connection as the
// request arrives, without answering; net/http retries the GET on a new
// connection. The second connection's request must carry a sane budget,
// and -race must stay quiet.
func TestReview87_KeepAliveRetry(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var conns atomic.Int64
	var mu sync.Mutex
	var budgets []string
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n := conns.Add(1)
			go func(c net.Conn, n int64) {
				defer c.Close()
				br := bufio.NewReader(c)
				for i := 0; ; i++ {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					io.Copy(io.Discard, req.Body)
					if i == 1 { // the second request on every conn: close without answering
						return
					}
					mu.Lock()
					budgets = append(budgets, req.Header.Get(deadline.Header))
					mu.Unlock()
					fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				}
			}(c, n)
		}
	}()
	base := &http.Transport{MaxIdleConnsPerHost: 1}
	defer base.CloseIdleConnections()
	var gotConn atomic.Int64
	tr := httpclient.NewTransport(httpclient.Base(base), httpclient.WithPipeline(review87Pipe()))
	hc := &http.Client{Transport: tr}
	for i := 0; i < 40; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) { gotConn.Add(1) }})
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+ln.Addr().String()+"/", nil)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		cancel()
	}
	mu.Lock()
	defer mu.Unlock()
	for i, b := range budgets {
		ms, err := strconv.Atoi(b)
		if err != nil || ms <= 0 || ms > 2000 {
			t.Errorf("request %d: budget %q", i, b)
		}
	}
	t.Logf("conns %d, answered %d, caller's GotConn fired %d", conns.Load(), len(budgets), gotConn.Load())
	if gotConn.Load() < 40 {
		t.Errorf("caller's GotConn fired %d times for 40 requests", gotConn.Load())
	}
}

// HTTP/2 over TLS, many concurrent requests with hedging and retries:
// each request's budget is within its caller's deadline (never less than
// what is left on arrival, never much more), -race quiet.
func TestReview87_H2Hedged(t *testing.T) {
	var bad atomic.Int64
	var n503 atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor != 2 {
			bad.Add(1)
		}
		v := r.Header.Values(deadline.Header)
		if len(v) != 1 {
			bad.Add(1)
			t.Errorf("budget header %q", v)
		}
		if n503.Add(1)%3 == 0 {
			w.WriteHeader(503)
			return
		}
		time.Sleep(time.Duration(n503.Load()%5) * time.Millisecond)
		w.Write([]byte("ok"))
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	base := srv.Client().Transport.(*http.Transport).Clone()
	base.ForceAttemptHTTP2 = true
	base.TLSClientConfig = &tls.Config{InsecureSkipVerify: true}
	defer base.CloseIdleConnections()
	p := review87Pipe(pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(4), retrypolicy.BaseDelay(time.Millisecond))),
		pipeline.WithHedging(hedge.New(hedge.Delay(time.Millisecond), hedge.MaxShare(1))))
	tr := httpclient.NewTransport(httpclient.Base(base), httpclient.WithPipeline(p))
	hc := &http.Client{Transport: tr}
	var traced atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 32; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) { traced.Add(1) }})
				req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
				req.Header.Set(deadline.Header, "1") // the caller's stale one: not forwarded
				resp, err := hc.Do(req)
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				cancel()
			}
		}()
	}
	wg.Wait()
	if bad.Load() != 0 {
		t.Errorf("%d bad requests", bad.Load())
	}
	t.Logf("server saw %d requests, caller's GotConn fired %d", n503.Load(), traced.Load())
	if traced.Load() < n503.Load() {
		t.Errorf("caller's GotConn fired %d times for %d requests", traced.Load(), n503.Load())
	}
}

// Hedges and retries each get their own header, and the value seen by
// the server is never below what was left of the caller's deadline as
// it arrived (the hop ends no earlier than its caller), nor more than a
// few ms above.
func TestReview87_RoundingUpSlowDial(t *testing.T) {
	type seen struct {
		at     time.Time
		budget int
		hedge  string
	}
	var mu sync.Mutex
	var all []seen
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := time.Now()
		b, _ := strconv.Atoi(r.Header.Get(deadline.Header))
		mu.Lock()
		all = append(all, seen{now, b, r.Header.Get("Request-Attempt")})
		mu.Unlock()
		if n.Add(1)%2 == 1 {
			time.Sleep(30 * time.Millisecond)
			w.WriteHeader(503)
			return
		}
		w.Write([]byte("ok"))
	}))
	defer srv.Close()
	base := &http.Transport{DisableKeepAlives: true, DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		time.Sleep(50 * time.Millisecond) // a slow dial
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}}
	p := review87Pipe(pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(4), retrypolicy.BaseDelay(time.Millisecond))),
		pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxShare(1))))
	tr := httpclient.NewTransport(httpclient.Base(base), httpclient.WithPipeline(p))
	for i := 0; i < 10; i++ {
		dl := time.Now().Add(1500 * time.Millisecond)
		ctx, cancel := context.WithDeadline(context.Background(), dl)
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
		mu.Lock()
		all = all[:0]
		mu.Unlock()
		resp, err := tr.RoundTrip(req)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		cancel()
		mu.Lock()
		for _, s := range all {
			hopEnd := s.at.Add(time.Duration(s.budget) * time.Millisecond)
			if hopEnd.Before(dl) {
				t.Errorf("call %d attempt %s: hop ends %v before its caller", i, s.hedge, dl.Sub(hopEnd))
			}
			// The rounding up (1 ms) and the request's transit, which under
			// the race detector on a loaded 2-core machine took 5.2 ms once
			// (CI); the dial, 50 ms, is what must not be added.
			if late := hopEnd.Sub(dl); late > 20*time.Millisecond {
				t.Errorf("call %d attempt %s: hop ends %v after its caller", i, s.hedge, late)
			}
		}
		mu.Unlock()
	}
}

type review87RT struct {
	got   chan *http.Request
	trace bool
}

func (r *review87RT) RoundTrip(req *http.Request) (*http.Response, error) {
	r.trace = httptrace.ContextClientTrace(req.Context()) != nil
	r.got <- req
	return &http.Response{StatusCode: 200, Body: http.NoBody, Header: http.Header{}, Request: req}, nil
}

func TestReview87_CustomBaseAndNoDeadline(t *testing.T) {
	rt := &review87RT{got: make(chan *http.Request, 1)}
	tr := httpclient.NewTransport(httpclient.Base(rt), httpclient.WithPipeline(review87Pipe()))
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://example.invalid/", nil)
	if _, err := tr.RoundTrip(req); err != nil {
		t.Fatal(err)
	}
	r := <-rt.got
	if v := r.Header.Get(deadline.Header); v == "" {
		t.Errorf("custom base: no budget header")
	}
	req, _ = http.NewRequestWithContext(context.Background(), "GET", "http://example.invalid/", nil)
	req.Header.Set(deadline.Header, "5")
	if _, err := tr.RoundTrip(req); err != nil {
		t.Fatal(err)
	}
	r = <-rt.got
	if v := r.Header.Values(deadline.Header); len(v) != 0 {
		t.Errorf("no deadline: header %q", v)
	}
	if rt.trace {
		t.Errorf("no deadline: a trace was installed")
	}
	if req.Header.Get(deadline.Header) != "5" {
		t.Errorf("caller's header modified")
	}
}

type review87Nop struct{}

func (review87Nop) RoundTrip(req *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: 200, Body: http.NoBody, Header: http.Header{}, Request: req}, nil
}

func review87HopEnd(t *testing.T, name string, dl time.Time, at time.Time, budget string) time.Duration {
	ms, err := strconv.Atoi(budget)
	if err != nil {
		t.Errorf("%s: budget %q", name, budget)
		return 0
	}
	late := at.Add(time.Duration(ms) * time.Millisecond).Sub(dl)
	if late < 0 {
		t.Errorf("%s: the hop ends %v before its caller", name, -late)
	}
	return late
}

// MaxConnsPerHost 1: the second request waits 300 ms for the connection;
// over HTTP/1 and over HTTP/2 with a slow dial (TLS).
func TestReview87_WaitForConn(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		type seen struct {
			at     time.Time
			budget string
			id     string
		}
		ch := make(chan seen, 4)
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ch <- seen{time.Now(), r.Header.Get(deadline.Header), r.URL.Query().Get("id")}
			if r.URL.Query().Get("id") == "slow" {
				time.Sleep(300 * time.Millisecond)
			}
		}))
		base := &http.Transport{MaxConnsPerHost: 1, DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			time.Sleep(100 * time.Millisecond)
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}}
		if h2 {
			srv.EnableHTTP2 = true
			srv.StartTLS()
			base.ForceAttemptHTTP2 = true
			base.TLSClientConfig = &tls.Config{InsecureSkipVerify: true}
		} else {
			srv.Start()
		}
		tr := httpclient.NewTransport(httpclient.Base(base), httpclient.WithPipeline(review87Pipe()))
		dl := time.Now().Add(2 * time.Second)
		ctx, cancel := context.WithDeadline(context.Background(), dl)
		var wg sync.WaitGroup
		for _, id := range []string{"slow", "second"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/?id="+id, nil)
				resp, err := tr.RoundTrip(req)
				if err != nil {
					t.Errorf("h2 %v %s: %v", h2, id, err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}()
			time.Sleep(20 * time.Millisecond)
		}
		wg.Wait()
		close(ch)
		for s := range ch {
			late := review87HopEnd(t, fmt.Sprintf("h2 %v %s", h2, s.id), dl, s.at, s.budget)
			t.Logf("h2 %v %s: hop ends %v after its caller", h2, s.id, late)
			// The dial alone takes 100 ms: a header set before the wait
			// for the connection is that late; the rest is the request's
			// time in transit, tens of ms on a loaded machine under -race.
			if late > 50*time.Millisecond {
				t.Errorf("h2 %v %s: hop ends %v after its caller", h2, s.id, late)
			}
		}
		cancel()
		base.CloseIdleConnections()
		srv.Close()
	}
}

// A caller's trace: all its hooks fire, not only GotConn.
func TestReview87_CallerTraceAllHooks(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }))
	defer srv.Close()
	tr := httpclient.NewTransport(httpclient.WithPipeline(review87Pipe()))
	var getConn, gotConn, wrote, first, connStart atomic.Int64
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GetConn:              func(string) { getConn.Add(1) },
		GotConn:              func(httptrace.GotConnInfo) { gotConn.Add(1) },
		ConnectStart:         func(string, string) { connStart.Add(1) },
		WroteHeaders:         func() { wrote.Add(1) },
		GotFirstResponseByte: func() { first.Add(1) },
	})
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if getConn.Load() != 1 || gotConn.Load() != 1 || wrote.Load() != 1 || first.Load() != 1 || connStart.Load() != 1 {
		t.Errorf("hooks: GetConn %d GotConn %d ConnectStart %d WroteHeaders %d GotFirstResponseByte %d", getConn.Load(), gotConn.Load(), connStart.Load(), wrote.Load(), first.Load())
	}
}
