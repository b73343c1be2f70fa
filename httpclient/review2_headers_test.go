package httpclient_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/deadline"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/retrysignal"
)

type r2seen struct {
	mu   sync.Mutex
	reqs []http.Header
	body []string
}

func (s *r2seen) add(r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.reqs = append(s.reqs, r.Header.Clone())
	s.body = append(s.body, string(b))
	s.mu.Unlock()
}

// fromAHedge calls through outer an operation whose first attempt is slow
// (until canceled, or 300 ms), so that a hedge goes, and whose other
// attempts send req(ctx) with hc.
func fromAHedge(outer *pipeline.Pipeline, hc *http.Client, req func(ctx context.Context) *http.Request) error {
	var calls atomic.Int32
	_, err := pipeline.Do(context.Background(), outer, func(ctx context.Context) (int, error) {
		if calls.Add(1) == 1 {
			select {
			case <-ctx.Done():
				return 0, ctx.Err()
			case <-time.After(300 * time.Millisecond):
				return 1, nil
			}
		}
		resp, err := hc.Do(req(ctx))
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return 2, nil
	})
	return err
}

// A request sent through a Transport from within a hedge of the
// Transport's own pipeline (a wrapper that runs a client call through
// the pipeline the client uses) goes out as a hedge numbered 0, which
// retrysignal.ParseAttempt rejects: it is the first attempt of its own
// request.
func TestReview2TransportInsideHedgeOfSamePipeline(t *testing.T) {
	var seen r2seen
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.add(r)
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	p := pipeline.New(pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3))),
		pipeline.WithHedging(hedge.New(hedge.Delay(2*time.Millisecond), hedge.MaxShare(1), hedge.MaxExtra(1))))
	hc := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(p))}
	err := fromAHedge(p, hc, func(ctx context.Context) *http.Request {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		return req
	})
	if err != nil {
		t.Fatal(err)
	}
	seen.mu.Lock()
	defer seen.mu.Unlock()
	if len(seen.reqs) == 0 {
		t.Fatal("no request")
	}
	// The request's own hedge, if an attempt outlasted the 2 ms delay on a
	// loaded machine, is "1/3; hedge", and may arrive first.
	first := false
	for _, r := range seen.reqs {
		v := r.Get(retrysignal.AttemptHeader)
		a, ok := retrysignal.ParseAttempt(v)
		if !ok || a.N != 1 {
			t.Errorf("an attempt of a request made inside a hedge of the same pipeline went out with %s %q (parses: %v, %+v); want \"1/3\"", retrysignal.AttemptHeader, v, ok, a)
		}
		first = first || ok && !a.Hedge
	}
	if !first {
		t.Errorf("no first attempt \"1/3\" among %d requests", len(seen.reqs))
	}
}

// The caller's request, headers of several values and non-canonical keys
// included, is sent as it is (plus the attempt's headers), never changed,
// and can be sent again, its body rewound as net/http asks of a request
// sent again (its first attempt sends the body as it is: review113).
func TestReview2CallerHeadersKeptAndRequestReusable(t *testing.T) {
	var seen r2seen
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.add(r)
		if n.Add(1)%2 == 1 {
			w.WriteHeader(http.StatusServiceUnavailable) // each request retried once
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	p := pipeline.New(pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Microsecond))))
	hc := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(p))}
	req, _ := http.NewRequest(http.MethodPost, srv.URL, bytes.NewReader([]byte("payload")))
	req.Header["x-lower"] = []string{"a"}
	req.Header.Add("X-Multi", "1")
	req.Header.Add("X-Multi", "2")
	req.Header.Add("Idempotency-Key", "k1")
	req.Header.Add("Idempotency-Key", "k2")
	req.Header.Set(deadline.Header, "5") // stale: the call has no deadline
	req.Header.Set(retrysignal.AttemptHeader, "7/9")
	before := req.Header.Clone()
	for round := range 2 {
		if round > 0 {
			req.Body, _ = req.GetBody()
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("round %d: status %d", round, resp.StatusCode)
		}
		if !equalHeader(before, req.Header) {
			t.Errorf("round %d: the caller's header changed: %v, was %v", round, req.Header, before)
		}
	}
	seen.mu.Lock()
	defer seen.mu.Unlock()
	if len(seen.reqs) != 4 {
		t.Fatalf("%d requests, want 4", len(seen.reqs))
	}
	wantAttempts := []string{"1/3", "2/3", "1/3", "2/3"}
	for i, h := range seen.reqs {
		if got := h.Values(retrysignal.AttemptHeader); !slices.Equal(got, []string{wantAttempts[i]}) {
			t.Errorf("request %d: attempt header %q, want %q", i, got, wantAttempts[i])
		}
		if got := h.Values("Idempotency-Key"); !slices.Equal(got, []string{"k1"}) {
			t.Errorf("request %d: Idempotency-Key %q", i, got)
		}
		if got := h.Values("X-Multi"); !slices.Equal(got, []string{"1", "2"}) {
			t.Errorf("request %d: X-Multi %q", i, got)
		}
		if got := h.Values("X-Lower"); !slices.Equal(got, []string{"a"}) {
			t.Errorf("request %d: x-lower %q", i, got)
		}
		if got := h.Values(deadline.Header); len(got) != 0 {
			t.Errorf("request %d: stale %s %q forwarded", i, deadline.Header, got)
		}
		if seen.body[i] != "payload" {
			t.Errorf("request %d: body %q", i, seen.body[i])
		}
	}
}

func equalHeader(a, b http.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

// A budget header of the caller's is replaced by the time left when the
// call has a deadline, and a lowercase method is sent once.
func TestReview2BudgetHeaderAndLowercaseMethod(t *testing.T) {
	var seen r2seen
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.add(r)
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	p := pipeline.New(pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Microsecond))))
	hc := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(p))}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "get", srv.URL, nil)
	req.Header.Set(deadline.Header, "999999")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	seen.mu.Lock()
	defer seen.mu.Unlock()
	if len(seen.reqs) != 1 {
		t.Errorf("lowercase get: %d requests (not one of net/http's methods: sent once, as before)", len(seen.reqs))
	}
	for _, h := range seen.reqs {
		v := h.Values(deadline.Header)
		if len(v) != 1 || v[0] == "999999" || !strings.HasPrefix(v[0], "9") && v[0] != "10000" { // 10 s, rounded up
			t.Errorf("budget header %q", v)
		}
	}
}

// Hedged POSTs with a body and a key: every attempt sends the whole body.
func TestReview2HedgedBodies(t *testing.T) {
	var seen r2seen
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.add(r)
		if n.Add(1) == 1 {
			time.Sleep(50 * time.Millisecond)
		}
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, "done")
	}))
	defer srv.Close()
	p := pipeline.New(pipeline.WithRetry(retrypolicy.New()),
		pipeline.WithHedging(hedge.New(hedge.Delay(5*time.Millisecond), hedge.MaxShare(1), hedge.MaxExtra(1))))
	hc := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(p))}
	for _, body := range []io.Reader{strings.NewReader("abc"), io.MultiReader(strings.NewReader("abc"))} {
		n.Store(0)
		req, _ := http.NewRequest(http.MethodPost, srv.URL, body)
		req.Header.Set("Idempotency-Key", "key")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "done" {
			t.Errorf("body %q", b)
		}
	}
	time.Sleep(100 * time.Millisecond)
	seen.mu.Lock()
	defer seen.mu.Unlock()
	for i, b := range seen.body {
		if b != "abc" {
			t.Errorf("request %d (%s) body %q", i, seen.reqs[i].Get(retrysignal.AttemptHeader), b)
		}
	}
	if len(seen.body) < 3 {
		t.Errorf("%d requests: no hedge", len(seen.body))
	}
}

// With BreakerPerHost, the per-host pipeline's hedges are marked as
// hedges, and the pipeline given (not the per-host one) does not take
// them for its own.
func TestReview2PerHostHedgeMarked(t *testing.T) {
	var seen r2seen
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.add(r)
		if n.Add(1) == 1 {
			time.Sleep(60 * time.Millisecond)
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	p := pipeline.New(pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3))),
		pipeline.WithHedging(hedge.New(hedge.Delay(5*time.Millisecond), hedge.MaxShare(1), hedge.MaxExtra(1))))
	hc := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(p),
		httpclient.BreakerPerHost(func(a string) *breaker.Breaker { return breaker.New(a) }))}
	resp, err := hc.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	time.Sleep(100 * time.Millisecond)
	seen.mu.Lock()
	defer seen.mu.Unlock()
	var got []string
	for _, h := range seen.reqs {
		got = append(got, h.Get(retrysignal.AttemptHeader))
	}
	slices.Sort(got)
	if !slices.Equal(got, []string{"1/3", "1/3; hedge"}) {
		t.Errorf("attempt headers %q", got)
	}
}

// The same, with a dependency that fails: the request's attempts are
// numbered from 0, so its last attempt tells the server "2/3" (the caller
// will retry) when it is the third and last; and a 409 to its first
// attempt (a POST with a key, no Retry-After: permanent) is retried as a
// hedge's.
func TestReview2TransportInsideHedgeOfSamePipelineNumbering(t *testing.T) {
	var seen r2seen
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.add(r)
		if r.Method == http.MethodPost {
			w.WriteHeader(http.StatusConflict)
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	p := pipeline.New(pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Microsecond))),
		pipeline.WithHedging(hedge.New(hedge.Delay(2*time.Millisecond), hedge.MaxShare(1), hedge.MaxExtra(1))))
	hc := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(p))}
	for _, method := range []string{http.MethodGet, http.MethodPost} {
		seen.mu.Lock()
		seen.reqs, seen.body = nil, nil
		seen.mu.Unlock()
		_ = fromAHedge(p, hc, func(ctx context.Context) *http.Request {
			req, _ := http.NewRequestWithContext(ctx, method, srv.URL, strings.NewReader("x"))
			req.Header.Set("Idempotency-Key", "k")
			return req
		})
		seen.mu.Lock()
		var got []string
		for _, h := range seen.reqs {
			// The request's own hedges, marked as such, when an attempt took
			// longer than the hedging delay (2 ms, on a loaded machine).
			if v := h.Get(retrysignal.AttemptHeader); !strings.HasSuffix(v, "; hedge") {
				got = append(got, v)
			}
		}
		seen.mu.Unlock()
		want := []string{"1/3", "2/3", "3/3"}
		if method == http.MethodPost {
			want = []string{"1/3"} // a 409 without Retry-After to a first attempt: permanent, not retried
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: attempt headers %q, want %q", method, got, want)
		}
	}
}

// Inside a hedge of another pipeline (p.With(...) included), a request's
// first attempt is "1/3".
func TestReview2TransportInsideHedgeOfOtherPipeline(t *testing.T) {
	var seen r2seen
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.add(r)
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	q := pipeline.New(pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3))),
		pipeline.WithHedging(hedge.New(hedge.Delay(2*time.Millisecond), hedge.MaxShare(1), hedge.MaxExtra(1))))
	p := q.With(pipeline.WithName("outer"))
	hc := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(q))}
	err := fromAHedge(p, hc, func(ctx context.Context) *http.Request {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		return req
	})
	if err != nil {
		t.Fatal(err)
	}
	seen.mu.Lock()
	defer seen.mu.Unlock()
	// The hedge, 2 ms later, may arrive first on a loaded machine.
	if !slices.ContainsFunc(seen.reqs, func(h http.Header) bool { return h.Get(retrysignal.AttemptHeader) == "1/3" }) {
		t.Errorf("no first attempt \"1/3\" among %v", seen.reqs)
	}
}
