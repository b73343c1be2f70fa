package httpclient_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/deadline"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fastRetry retries at once, so real-network tests stay short.
// fastRetry is a pipeline retrying with 1 ms base delays, with stages.
func fastRetry(stages ...pipeline.Option) httpclient.Option {
	return httpclient.WithPipeline(pipeline.New(append([]pipeline.Option{
		pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(time.Millisecond)))}, stages...)...))
}

// flaky answers 503 to its first failures requests, then 200 with the
// request's body echoed, and records the keys it saw.
type flaky struct {
	mu       sync.Mutex
	failures int
	calls    int
	keys     []string
	bodies   []string
}

func (f *flaky) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	f.calls++
	n := f.calls
	f.keys = append(f.keys, r.Header.Get(idempotency.Header))
	f.bodies = append(f.bodies, string(body))
	f.mu.Unlock()
	if n <= f.failures {
		http.Error(w, "overloaded", http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"attempt":`+string(rune('0'+n))+`}`)
}

func newServer(t *testing.T, h http.Handler) *httptest.Server {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

func TestRetriesOnlyWhatIsSafe(t *testing.T) {
	tests := []struct {
		name      string
		method    string
		key       string
		auto      bool
		wantCalls int
		wantOK    bool
	}{
		{"GET is retried", http.MethodGet, "", false, 3, true},
		{"PUT is retried", http.MethodPut, "", false, 3, true},
		{"DELETE is retried", http.MethodDelete, "", false, 3, true},
		{"POST without key is tried once", http.MethodPost, "", false, 1, false},
		{"PATCH without key is tried once", http.MethodPatch, "", false, 1, false},
		{"POST with key is retried", http.MethodPost, "order-1", false, 3, true},
		{"POST with a generated key is retried", http.MethodPost, "", true, 3, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &flaky{failures: 2}
			srv := newServer(t, f)
			opts := []httpclient.Option{fastRetry()}
			if tt.auto {
				opts = append(opts, httpclient.AutoIdempotencyKey())
			}
			c := httpclient.New(opts...)
			var out struct{ Attempt int }
			var callOpts []httpclient.CallOption
			if tt.key != "" {
				callOpts = append(callOpts, httpclient.IdempotencyKey(tt.key))
			}
			var err error
			switch tt.method {
			case http.MethodGet:
				err = c.GetJSON(t.Context(), srv.URL, &out, callOpts...)
			case http.MethodPut:
				err = c.PutJSON(t.Context(), srv.URL, map[string]int{"qty": 2}, &out, callOpts...)
			case http.MethodDelete:
				err = c.DeleteJSON(t.Context(), srv.URL, &out, callOpts...)
			case http.MethodPost:
				err = c.PostJSON(t.Context(), srv.URL, map[string]int{"qty": 2}, &out, callOpts...)
			case http.MethodPatch:
				req, _ := http.NewRequestWithContext(t.Context(), http.MethodPatch, srv.URL, strings.NewReader(`{}`))
				var resp *http.Response
				resp, err = (&http.Client{Transport: httpclient.NewTransport(opts...)}).Do(req)
				require.NoError(t, err)
				resp.Body.Close()
				assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
				err = errors.New("503")
			}
			assert.Equal(t, tt.wantCalls, f.calls)
			if !tt.wantOK {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, 3, out.Attempt)
			for _, k := range f.keys {
				assert.Equal(t, f.keys[0], k, "the same key on every attempt")
			}
			if tt.key != "" || tt.auto {
				assert.NotEmpty(t, f.keys[0])
			}
			for _, b := range f.bodies {
				assert.Equal(t, f.bodies[0], b, "the body is rewound for every attempt")
			}
		})
	}
}

func TestPermanentStatusIsOneAttemptWithTypedError(t *testing.T) {
	var calls atomic.Int64
	srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, `{"error":"qty must be positive"}`)
	}))
	b := breaker.New("orders", breaker.ConsecutiveFailures(1))
	c := httpclient.New(fastRetry(pipeline.WithBreaker(b)))
	err := c.PutJSON(t.Context(), srv.URL+"/orders/1?token=secret", map[string]int{"qty": -1}, nil)
	var se *httpclient.StatusError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, http.StatusBadRequest, se.StatusCode)
	assert.JSONEq(t, `{"error":"qty must be positive"}`, string(se.Body))
	assert.NotContains(t, err.Error(), "secret", "no query in errors")
	assert.True(t, resilience.IsPermanent(err))
	assert.EqualValues(t, 1, calls.Load())
	assert.Equal(t, resilience.StateClosed, b.State(), "a caller error does not trip the breaker")
}

func TestServerErrorsAreNotRetriedButTripTheBreaker(t *testing.T) {
	var calls atomic.Int64
	srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		http.Error(w, "bug", http.StatusInternalServerError)
	}))
	b := breaker.New("orders", breaker.ConsecutiveFailures(2))
	c := httpclient.New(fastRetry(pipeline.WithBreaker(b)))
	for range 3 {
		_ = c.GetJSON(t.Context(), srv.URL, nil)
	}
	err := c.GetJSON(t.Context(), srv.URL, nil)
	require.ErrorIs(t, err, breaker.ErrOpen)
	assert.EqualValues(t, 2, calls.Load())
}

func TestRetryAfterIsHonouredAndCapped(t *testing.T) {
	tests := []struct {
		name   string
		header func() string
		max    time.Duration
		want   time.Duration
	}{
		{"seconds", func() string { return "2" }, 10 * time.Second, 2 * time.Second},
		{"capped by MaxDelay", func() string { return "120" }, 5 * time.Second, 5 * time.Second},
		{"HTTP date", func() string { return time.Now().Add(3 * time.Second).UTC().Format(http.TimeFormat) }, 10 * time.Second, 2 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var calls atomic.Int64
			srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if calls.Add(1) == 1 {
					w.Header().Set("Retry-After", tt.header())
					w.WriteHeader(http.StatusTooManyRequests)
					return
				}
				_, _ = io.WriteString(w, `{}`)
			}))
			var slept time.Duration
			c := httpclient.New(httpclient.WithPipeline(pipeline.New(pipeline.WithRetry(retrypolicy.New(
				retrypolicy.MaxDelay(tt.max),
				retrypolicy.WithSleep(func(_ context.Context, d time.Duration) error { slept = d; return nil }),
			)))))
			require.NoError(t, c.GetJSON(t.Context(), srv.URL, nil))
			assert.GreaterOrEqual(t, slept, tt.want)
			assert.LessOrEqual(t, slept, tt.want+time.Second)
		})
	}
}

func TestRoundTripperReturnsTheLastAnswer(t *testing.T) {
	f := &flaky{failures: 10}
	srv := newServer(t, f)
	hc := &http.Client{Transport: httpclient.NewTransport(fastRetry(pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(time.Millisecond), retrypolicy.MaxAttempts(3)))))}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL, nil)
	req.Header.Set("X-Trace", "1")
	before := req.Header.Clone()
	resp, err := hc.Do(req)
	require.NoError(t, err, "an HTTP answer is a response, as an SDK expects")
	defer resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	body, _ := io.ReadAll(resp.Body)
	assert.Equal(t, "overloaded\n", string(body))
	assert.Equal(t, 3, f.calls)
	assert.Equal(t, before, req.Header, "the caller's request is not modified")
}

func TestOpenBreakerFailsFastAndClosesTheBody(t *testing.T) {
	b := breaker.New("x", breaker.ConsecutiveFailures(1))
	_ = b.Execute(t.Context(), func(context.Context) error { return errors.New("down") })
	body := &trackedBody{Reader: strings.NewReader("{}")}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://127.0.0.1:1/", body)
	_, err := httpclient.NewTransport(httpclient.WithPipeline(pipeline.New(pipeline.WithBreaker(b)))).RoundTrip(req)
	require.ErrorIs(t, err, breaker.ErrOpen)
	assert.True(t, body.closed.Load(), "a RoundTripper closes the request body")
}

type trackedBody struct {
	io.Reader
	closed atomic.Bool
}

func (b *trackedBody) Close() error { b.closed.Store(true); return nil }

// countingTransport answers 503 twice, then 200, and tracks its bodies.
type countingTransport struct {
	mu     sync.Mutex
	n      int
	bodies []*trackedBody
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	status := http.StatusServiceUnavailable
	if c.n > 2 {
		status = http.StatusOK
	}
	b := &trackedBody{Reader: strings.NewReader(strings.Repeat("x", 100))}
	c.bodies = append(c.bodies, b)
	return &http.Response{StatusCode: status, Status: http.StatusText(status), Header: http.Header{}, Body: b, Request: r}, nil
}

func TestNoResponseBodyLeaks(t *testing.T) {
	base := &countingTransport{}
	c := httpclient.New(httpclient.Base(base), fastRetry(pipeline.WithTimeBudget(time.Second), pipeline.WithAttemptTimeout(time.Second)))
	require.NoError(t, c.GetJSON(t.Context(), "http://dep/", nil))
	require.Len(t, base.bodies, 3)
	for i, b := range base.bodies {
		assert.True(t, b.closed.Load(), "body %d", i)
	}
}

func TestSuccessfulBodyOutlivesTheBudgetContext(t *testing.T) {
	srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.(http.Flusher).Flush()
		time.Sleep(20 * time.Millisecond)
		_, _ = io.WriteString(w, "late body")
	}))
	hc := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(pipeline.New(pipeline.WithTimeBudget(5*time.Second), pipeline.WithAttemptTimeout(5*time.Second))))}
	resp, err := hc.Get(srv.URL)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err, "the budget's context lives until the body is closed")
	assert.Equal(t, "late body", string(body))
	require.NoError(t, resp.Body.Close())
}

func TestDeadlinePropagatesThroughServices(t *testing.T) {
	var bDeadline, bLeft atomic.Int64 // unix nanos, nanos
	b := newServer(t, deadline.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, ok := r.Context().Deadline()
		if ok {
			bDeadline.Store(d.UnixNano())
			bLeft.Store(int64(time.Until(d)))
		}
		_, _ = io.WriteString(w, `{"stock":3}`)
	})))
	inner := httpclient.New(fastRetry())
	a := newServer(t, deadline.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(50 * time.Millisecond) // A's own work eats into the budget
		var out map[string]int
		if err := inner.GetJSON(r.Context(), b.URL, &out); err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		_ = json.NewEncoder(w).Encode(out)
	})))

	start := time.Now()
	c := httpclient.New(fastRetry(pipeline.WithTimeBudget(2 * time.Second)))
	var out map[string]int
	require.NoError(t, c.GetJSON(t.Context(), a.URL, &out))
	assert.Equal(t, 3, out["stock"])
	require.NotZero(t, bDeadline.Load(), "B got a deadline")
	// Relative budgets ignore the network's latency, so compare durations.
	assert.Less(t, time.Unix(0, bDeadline.Load()).Sub(start), 2*time.Second+100*time.Millisecond)
	assert.Greater(t, time.Duration(bLeft.Load()), time.Second)
	assert.LessOrEqual(t, time.Duration(bLeft.Load()), 2*time.Second-50*time.Millisecond, "B has what the budget left after A's work")
}

func TestNoAttemptAfterTheBudget(t *testing.T) {
	var calls atomic.Int64
	srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		<-r.Context().Done() // hangs until the client gives up
	}))
	c := httpclient.New(
		httpclient.WithPipeline(pipeline.New(
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(0), retrypolicy.BaseDelay(10*time.Millisecond))),
			pipeline.WithTimeBudget(300*time.Millisecond),
			pipeline.WithAttemptTimeout(100*time.Millisecond),
		)),
	)
	start := time.Now()
	err := c.GetJSON(t.Context(), srv.URL, nil)
	elapsed := time.Since(start)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, elapsed, 500*time.Millisecond)
	n := calls.Load()
	assert.GreaterOrEqual(t, n, int64(2))
	time.Sleep(200 * time.Millisecond)
	assert.Equal(t, n, calls.Load(), "no attempt once the budget is spent")
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"120", 2 * time.Minute, true},
		{" 0 ", 0, true},
		{"Wed, 02 Dec 2026 12:00:30 GMT", 30 * time.Second, true},
		{"Wed, 02 Dec 2026 11:00:00 GMT", 0, true},
		{"Wednesday, 02-Dec-26 12:01:00 GMT", time.Minute, true},
		{"", 0, false},
		{"-1", 0, false},
		{"1.5", 0, false},
		{"9999999999", math.MaxInt64, true}, // past a Duration's reach: the longest, as a date that far off
		{"soon", 0, false},
		// Every digit, 9 included, up to nine of them; ten or more are the
		// longest delay, whatever their value.
		{"9", 9 * time.Second, true},
		{"90", 90 * time.Second, true},
		{"099", 99 * time.Second, true},
		{"999999999", 999999999 * time.Second, true},
		{"000000009", 9 * time.Second, true},
		{"0000000009", 9 * time.Second, true}, // 1*DIGIT: leading zeros are not length
		{"1000000000", math.MaxInt64, true},
		{"9s", 0, false},
		{":9", 0, false},
		{"/9", 0, false},
	}
	for _, tt := range tests {
		got, ok := httpclient.ParseRetryAfter(tt.in, now)
		assert.Equal(t, tt.ok, ok, "%q", tt.in)
		assert.Equal(t, tt.want, got, "%q", tt.in)
	}
}

func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{"120", "0", "Wed, 02 Dec 2026 12:00:30 GMT", "Sun Nov  6 08:49:37 1994", "-3", "1e9", " 7", "99999999999999999999"} {
		f.Add(s)
	}
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, s string) {
		d, ok := httpclient.ParseRetryAfter(s, now)
		if !ok {
			assert.Zero(t, d)
			return
		}
		assert.GreaterOrEqual(t, d, time.Duration(0))
	})
}

func TestFailedBodiesAreDrainedSoTheConnectionIsReused(t *testing.T) {
	f := &flaky{failures: 2}
	srv := httptest.NewUnstartedServer(f)
	var conns atomic.Int64
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	base := &http.Transport{}
	t.Cleanup(base.CloseIdleConnections)
	require.NoError(t, httpclient.New(httpclient.Base(base), fastRetry()).GetJSON(t.Context(), srv.URL, nil))
	assert.Equal(t, 3, f.calls)
	assert.EqualValues(t, 1, conns.Load(), "three attempts over one connection")
}
