package httpclient_test

// review169: extreme httpclient options against a healthy server.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

const r169Max = time.Duration(math.MaxInt64)

func TestReview169HealthyTransport(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Write(append([]byte("ok:"), b...))
	}))
	defer srv.Close()
	srv2 := httptest.NewServer(srv.Config.Handler)
	defer srv2.Close()
	pl := func() *pipeline.Pipeline {
		return pipeline.New(pipeline.WithTimeBudget(r169Max), pipeline.WithAttemptTimeout(r169Max),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(math.MaxInt), retrypolicy.MaxDelay(r169Max), retrypolicy.BaseDelay(r169Max))),
			pipeline.WithBreaker(breaker.New("r169", breaker.OpenTimeout(r169Max))),
			pipeline.WithLimit(limit.NewFixed(1)),
			pipeline.WithHedging(hedge.New(hedge.Delay(1), hedge.MaxExtra(math.MaxInt), hedge.MaxShare(1))))
	}
	cases := []struct {
		name string
		opts func() []httpclient.Option
	}{
		{"buffer 0", func() []httpclient.Option { return []httpclient.Option{httpclient.MaxBufferedBody(0)} }},
		{"buffer max", func() []httpclient.Option { return []httpclient.Option{httpclient.MaxBufferedBody(math.MaxInt64)} }},
		{"error body 1", func() []httpclient.Option { return []httpclient.Option{httpclient.MaxErrorBody(1)} }},
		{"error body maxint", func() []httpclient.Option { return []httpclient.Option{httpclient.MaxErrorBody(math.MaxInt)} }},
		{"breakers 1", func() []httpclient.Option {
			return []httpclient.Option{httpclient.BreakerPerHost(func(string) *breaker.Breaker { return breaker.New("h") }), httpclient.MaxBreakers(1)}
		}},
		{"breakers maxint", func() []httpclient.Option {
			return []httpclient.Option{httpclient.BreakerPerHost(func(string) *breaker.Breaker { return breaker.New("h") }), httpclient.MaxBreakers(math.MaxInt)}
		}},
		{"extreme pipeline", func() []httpclient.Option {
			return []httpclient.Option{httpclient.WithPipeline(pl()), httpclient.AutoIdempotencyKey()}
		}},
		{"extreme pipeline, buffer 0", func() []httpclient.Option {
			return []httpclient.Option{httpclient.WithPipeline(pl()), httpclient.MaxBufferedBody(0), httpclient.AutoIdempotencyKey()}
		}},
		{"classify 200..599 success", func() []httpclient.Option {
			return []httpclient.Option{httpclient.ClassifyStatus(100, resilience.ClassSuccess), httpclient.ClassifyStatus(599, resilience.ClassSuccess)}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := &http.Client{Transport: httpclient.NewTransport(tc.opts()...), Timeout: 5 * time.Second}
			for i, u := range []string{srv.URL, srv2.URL, srv.URL, srv2.URL} {
				for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut} {
					var body io.Reader
					switch i % 2 {
					case 0:
						body = strings.NewReader("payload")
					case 1:
						body = io.NopCloser(bytes.NewReader([]byte("payload"))) // no GetBody
					}
					if m == http.MethodGet {
						body = nil
					}
					req, _ := http.NewRequestWithContext(context.Background(), m, u, body)
					resp, err := c.Do(req)
					if err != nil {
						t.Fatalf("%s %s #%d to a healthy server: %v", m, u, i, err)
					}
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					want := "ok:"
					if body != nil {
						want = "ok:payload"
					}
					if resp.StatusCode != 200 || string(b) != want {
						t.Fatalf("%s #%d: %d %q", m, i, resp.StatusCode, b)
					}
				}
			}
		})
	}
}

// TestReview169MaxErrorBody: the StatusError of the Client keeps exactly
// min(n, len) bytes, Truncated iff longer.
func TestReview169MaxErrorBody(t *testing.T) {
	const body = "0123456789"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadRequest)
		w.Write([]byte(body))
	}))
	defer srv.Close()
	for _, n := range []int{1, 9, 10, 11, math.MaxInt32, math.MaxInt - 1, math.MaxInt} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			c := httpclient.New(httpclient.MaxErrorBody(n))
			var out any
			err := c.GetJSON(context.Background(), srv.URL, &out)
			var se *httpclient.StatusError
			if !errors.As(err, &se) {
				t.Fatalf("err %v", err)
			}
			want := body[:min(n, len(body))]
			if string(se.Body) != want || se.Truncated != (n < len(body)) {
				t.Fatalf("MaxErrorBody(%d): Body %q Truncated %v", n, se.Body, se.Truncated)
			}
		})
	}
}

// TestReview169OptionPanics: the documented panics.
func TestReview169OptionPanics(t *testing.T) {
	cases := []struct {
		name   string
		panics bool
		f      func()
	}{
		{"MaxBreakers(0)", true, func() { httpclient.MaxBreakers(0) }},
		{"MaxBreakers(MinInt)", true, func() { httpclient.MaxBreakers(math.MinInt) }},
		{"MaxErrorBody(0)", true, func() { httpclient.MaxErrorBody(0) }},
		{"MaxBufferedBody(-1)", true, func() { httpclient.MaxBufferedBody(-1) }},
		{"MaxBufferedBody(MinInt64)", true, func() { httpclient.MaxBufferedBody(math.MinInt64) }},
		{"ClassifyStatus(99)", true, func() { httpclient.ClassifyStatus(99, resilience.ClassTransient) }},
		{"ClassifyStatus(600)", true, func() { httpclient.ClassifyStatus(600, resilience.ClassTransient) }},
		{"ClassifyStatus(MinInt)", true, func() { httpclient.ClassifyStatus(math.MinInt, resilience.ClassTransient) }},
		{"ClassifyStatus(200, transient)", true, func() { httpclient.ClassifyStatus(200, resilience.ClassTransient) }},
		{"ClassifyStatus(399, terminal)", true, func() { httpclient.ClassifyStatus(399, resilience.ClassTerminal) }},
		{"ClassifyStatus(500, rejected)", true, func() { httpclient.ClassifyStatus(500, resilience.ClassRejected) }},
		{"ClassifyStatus(500, 255)", true, func() { httpclient.ClassifyStatus(500, 255) }},
		{"ClassifyStatus(500, pending)", false, func() { httpclient.ClassifyStatus(500, resilience.ClassPending) }},
		{"ClassifyStatus(400, success)", false, func() { httpclient.ClassifyStatus(400, resilience.ClassSuccess) }},
		{"BreakerPerHost(nil)", true, func() { httpclient.BreakerPerHost(nil) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got any
			func() {
				defer func() { got = recover() }()
				tc.f()
			}()
			if (got != nil) != tc.panics {
				t.Fatalf("panic %v, want panic %v", got, tc.panics)
			}
			if got != nil && !strings.HasPrefix(fmt.Sprint(got), "httpclient:") {
				t.Fatalf("panic message %q", got)
			}
		})
	}
}

// TestReview169ParseRetryAfter: the edges of delay-seconds and dates.
func TestReview169ParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		v    string
		want time.Duration
		ok   bool
	}{
		{"0", 0, true},
		{"000000000000000000000000001", time.Second, true},
		{"999999999", 999999999 * time.Second, true},
		{"1000000000", math.MaxInt64, true},
		{"4294967296", math.MaxInt64, true},
		{"99999999999999999999999999999", math.MaxInt64, true},
		{"9223372036854775808", math.MaxInt64, true},
		{"-1", 0, false},
		{"+1", 0, false},
		{"1.5", 0, false},
		{"1e3", 0, false},
		{"12345678901x", 0, false},
		{"Fri, 31 Dec 9999 23:59:59 GMT", math.MaxInt64, true},
		{"Sun, 06 Nov 1994 08:49:37 GMT", 0, true},
		{"Mon, 07 Dec 2026 12:00:01 GMT", time.Second, true},
	}
	for _, tc := range cases {
		got, ok := httpclient.ParseRetryAfter(tc.v, now)
		if got != tc.want || ok != tc.ok {
			t.Errorf("ParseRetryAfter(%q) = %v, %v; want %v, %v", tc.v, got, ok, tc.want, tc.ok)
		}
	}
}

// TestReview169HugeRetryAfter: a Retry-After too long to fit a duration
// (or a far date) is waited for up to MaxDelay, then the retry is sent.
func TestReview169HugeRetryAfter(t *testing.T) {
	for _, ra := range []string{"99999999999999999999", "4294967296", "Fri, 31 Dec 9999 23:59:59 GMT", "999999999"} {
		t.Run(ra, func(t *testing.T) {
			n := 0
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if n++; n == 1 {
					w.Header().Set("Retry-After", ra)
					w.WriteHeader(http.StatusServiceUnavailable)
					return
				}
				w.Write([]byte("ok"))
			}))
			defer srv.Close()
			p := pipeline.New(pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxDelay(20*time.Millisecond))), pipeline.WithTimeBudget(r169Max))
			c := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(p)), Timeout: 5 * time.Second}
			start := time.Now()
			resp, err := c.Get(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 200 || n != 2 {
				t.Fatalf("status %d after %d requests", resp.StatusCode, n)
			}
			if el := time.Since(start); el > 2*time.Second {
				t.Fatalf("took %v with MaxDelay 20ms", el)
			}
		})
	}
}

// TestReview169BufferedBodyBoundary: a body of L bytes without GetBody,
// answered 503 once: retried whole with MaxBufferedBody(L) and above
// (MaxInt64 included), not retried (ErrBodyNotRetried) below L; known and
// unknown length.
func TestReview169BufferedBodyBoundary(t *testing.T) {
	const L = 1000
	payload := bytes.Repeat([]byte("x"), L)
	for _, known := range []bool{true, false} {
		for _, n := range []int64{0, 1, L - 1, L, L + 1, math.MaxInt64 - 1, math.MaxInt64} {
			t.Run(fmt.Sprintf("known=%v/n=%d", known, n), func(t *testing.T) {
				calls := 0
				var got []byte
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					b, _ := io.ReadAll(r.Body)
					if calls++; calls == 1 {
						w.WriteHeader(http.StatusServiceUnavailable)
						return
					}
					got = b
					w.Write([]byte("ok"))
				}))
				defer srv.Close()
				p := pipeline.New(pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(time.Millisecond))))
				c := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(p), httpclient.MaxBufferedBody(n)), Timeout: 5 * time.Second}
				req, _ := http.NewRequest(http.MethodPut, srv.URL, io.NopCloser(bytes.NewReader(payload)))
				if known {
					req.ContentLength = L
				} else {
					req.ContentLength = -1
				}
				resp, err := c.Do(req)
				if n >= L {
					if err != nil {
						t.Fatalf("MaxBufferedBody(%d), body %d: %v", n, L, err)
					}
					resp.Body.Close()
					if resp.StatusCode != 200 || !bytes.Equal(got, payload) {
						t.Fatalf("status %d, retried body %d bytes", resp.StatusCode, len(got))
					}
					return
				}
				if err == nil {
					resp.Body.Close()
					if resp.StatusCode == 200 {
						t.Fatalf("MaxBufferedBody(%d) < body %d: retried anyway (calls %d, body %d bytes)", n, L, calls, len(got))
					}
					return // the 503 itself, not retried
				}
				if !errors.Is(err, httpclient.ErrBodyNotRetried) {
					t.Fatalf("MaxBufferedBody(%d) < body %d: %v, want ErrBodyNotRetried", n, L, err)
				}
			})
		}
	}
}
