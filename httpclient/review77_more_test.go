package httpclient_test

import (
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// TestReview77_BadURLsFillMaxBreakers: the caller's bad URLs (a scheme
// net/http does not speak) take no per-host breaker, so a dead host and a
// healthy one still have theirs, and the dead one's failures never reject
// the healthy one.
func TestReview77_BadURLsFillMaxBreakers(t *testing.T) {
	for _, typos := range []int{0, 8} {
		t.Run(fmt.Sprint(typos), func(t *testing.T) { review77Fill(t, typos) })
	}
}

func review77Fill(t *testing.T, typos int) {
	good := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200) }))
	defer good.Close()
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(502) }))
	defer bad.Close()
	shared := breaker.New("shared", breaker.ConsecutiveFailures(3), breaker.OpenTimeout(time.Minute))
	p := pipeline.New(pipeline.WithBreaker(shared), pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(1))))
	tr := httpclient.NewTransport(httpclient.WithPipeline(p), httpclient.MaxBreakers(8),
		httpclient.BreakerPerHost(func(a string) *breaker.Breaker {
			return breaker.New(a, breaker.ConsecutiveFailures(3), breaker.OpenTimeout(time.Minute))
		}))
	hc := &http.Client{Transport: tr}
	// The caller's own mistakes: URLs the client refuses to send.
	for i := range typos {
		_, err := hc.Get(fmt.Sprintf("htp://typo%d.example/", i))
		if err == nil {
			t.Fatal("expected error")
		}
	}
	for range 5 {
		resp, err := hc.Get(bad.URL)
		if err == nil {
			resp.Body.Close()
		}
	}
	resp, err := hc.Get(good.URL)
	if err != nil {
		t.Errorf("healthy host rejected after caller's bad URLs and another host's failures: %v", err)
		return
	}
	resp.Body.Close()
}

// TestReview77_ClientTrailingSlowBody: GetJSON returns once the JSON is
// decoded, though the server keeps the response open: the rest is read for
// DrainTimeout at most, as a plain client that decodes and closes.
func TestReview77_ClientTrailingSlowBody(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"a":1}`+"\n")
		http.NewResponseController(w).Flush()
		select {
		case <-r.Context().Done():
		case <-time.After(3 * time.Second):
		}
	}))
	defer srv.Close()
	// plain
	start := time.Now()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	var out struct{ A int }
	if err := jsonDecode(resp.Body, &out); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	plain := time.Since(start)
	start = time.Now()
	c := httpclient.New()
	if err := c.GetJSON(context.Background(), srv.URL, &out); err != nil {
		t.Fatal(err)
	}
	ours := time.Since(start)
	t.Logf("plain %v ours %v", plain, ours)
	if ours > plain+time.Second {
		t.Errorf("GetJSON took %v, plain decode+close %v", ours, plain)
	}
}

func jsonDecode(r io.Reader, v any) error {
	b := make([]byte, 64)
	n, _ := r.Read(b)
	if !strings.Contains(string(b[:n]), `"a":1`) {
		return fmt.Errorf("got %q", b[:n])
	}
	return nil
}

// TestReview77_CloseIdleConnections: http.Client.CloseIdleConnections
// reaches the base through the Transport.
func TestReview77_CloseIdleConnections(t *testing.T) {
	var open atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	srv.Config.ConnState = func(c net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			open.Add(1)
		case http.StateClosed:
			open.Add(-1)
		}
	}
	srv.Start()
	defer srv.Close()
	for _, name := range []string{"plain", "ours"} {
		base := &http.Transport{}
		var rt http.RoundTripper = base
		if name == "ours" {
			rt = httpclient.NewTransport(httpclient.Base(base))
		}
		hc := &http.Client{Transport: rt}
		resp, err := hc.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		hc.CloseIdleConnections()
		time.Sleep(100 * time.Millisecond)
		if open.Load() != 0 {
			t.Errorf("%s: http.Client.CloseIdleConnections left %d connections open", name, open.Load())
		}
		base.CloseIdleConnections()
		time.Sleep(50 * time.Millisecond)
	}
	_ = fmt.Sprint()
}

// TestReview77_ParseRetryAfter: delay-seconds is 1*DIGIT, leading zeros
// included.
func TestReview77_ParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		v  string
		ok bool
		d  time.Duration
	}{
		{"5", true, 5 * time.Second},
		{"-1", false, 0},
		{"+5", false, 0},
		{"1.5", false, 0},
		{"999999999", true, 999999999 * time.Second},
		{"0000000005", true, 5 * time.Second},         // leading zeros: RFC delay-seconds = 1*DIGIT
		{"18446744073709551616", true, math.MaxInt64}, // past a Duration: the longest (review127)
		{"Thu, 01 Jan 2026 00:00:10 GMT", true, 10 * time.Second},
		{"Thursday, 01-Jan-26 00:00:10 GMT", true, 10 * time.Second},
		{"Thu Jan  1 00:00:10 2026", true, 10 * time.Second},
		{"Wed, 31 Dec 2025 00:00:00 GMT", true, 0},
		{"garbage", false, 0},
		{"5 ", true, 5 * time.Second},
		{"5, 6", false, 0},
	} {
		d, ok := httpclient.ParseRetryAfter(c.v, now)
		if ok != c.ok || d != c.d {
			t.Errorf("%q: got %v %v want %v %v", c.v, d, ok, c.d, c.ok)
		}
	}
}
