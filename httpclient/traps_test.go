package httpclient_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/retrysignal"
	"github.com/resiliencekit/resiliencekit/throttle"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNonsenseOptionsPanicNamingThemselves: an option that cannot make
// sense fails at once, when the program starts, and its panic names the
// option, so that the reader of a crash knows which line to fix.
func TestNonsenseOptionsPanicNamingThemselves(t *testing.T) {
	for _, tc := range []struct {
		name string // what the panic must name
		make func()
	}{
		{`httpclient: RetryMethods("POSTT")`, func() { httpclient.RetryMethods("POSTT") }},
		{"httpclient: ClassifyStatus(200, transient)", func() { httpclient.ClassifyStatus(200, resilience.ClassTransient) }},
		{"httpclient: ClassifyStatus(700,", func() { httpclient.ClassifyStatus(700, resilience.ClassTransient) }},
		{"httpclient: MaxBreakers(0)", func() { httpclient.MaxBreakers(0) }},
		{"httpclient: MaxErrorBody(0)", func() { httpclient.MaxErrorBody(0) }},
		{"httpclient: MaxBufferedBody(-1)", func() { httpclient.MaxBufferedBody(-1) }},
		{"httpclient: TrustNoRetry(nil)", func() { httpclient.TrustNoRetry(nil) }},
		{"httpclient: BreakerPerHost(nil)", func() { httpclient.BreakerPerHost(nil) }},
		{"pipeline: WithTimeBudget(-1s)", func() { pipeline.WithTimeBudget(-time.Second) }},
		{"pipeline: WithAttemptTimeout(-1s)", func() { pipeline.WithAttemptTimeout(-time.Second) }},
		{"retrypolicy: MaxAttempts(-1)", func() { retrypolicy.MaxAttempts(-1) }},
		{"retrypolicy: BaseDelay(-1s)", func() { retrypolicy.BaseDelay(-time.Second) }},
		{"retrypolicy: MaxDelay(0s)", func() { retrypolicy.MaxDelay(0) }},
		{"retrypolicy: NewQuota ratio", func() { retrypolicy.NewQuota(-1, 1, time.Second) }},
		{"breaker: FailureRate(1.5, 10)", func() { breaker.FailureRate(1.5, 10) }},
		{"breaker: OpenTimeout(0s)", func() { breaker.OpenTimeout(0) }},
		{"limit: NewFixed(0)", func() { limit.NewFixed(0) }},
		{"throttle: K(1.05)", func() { throttle.K(1.05) }},
		{"hedge: Quantile(1.5)", func() { hedge.Quantile(1.5) }},
		{"hedge: Delay(0s)", func() { hedge.Delay(0) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				r := recover()
				if r == nil {
					t.Fatalf("%s: no panic", tc.name)
				}
				if msg, _ := r.(string); !strings.Contains(msg, tc.name) {
					t.Errorf("panic %q does not name %q", r, tc.name)
				}
			}()
			tc.make()
		})
	}
}

// TestErrorsNameTheirCause: each error says what happened in words a
// reader can act on, and still matches the sentinels a program tests.
func TestErrorsNameTheirCause(t *testing.T) {
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		switch r.URL.Path {
		case "/busy":
			http.Error(w, "busy", http.StatusServiceUnavailable)
		case "/missing":
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	fast := retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond))
	hang := func(ctx context.Context) (int, error) { <-ctx.Done(); return 0, ctx.Err() }

	for _, tc := range []struct {
		name  string
		call  func() error
		says  []string // what the message must contain
		is    []error  // what it must match
		isNot []error  // what it must not
	}{
		{
			name: "attempt timeout",
			call: func() error {
				p := pipeline.New(pipeline.WithRetry(fast), pipeline.WithAttemptTimeout(5*time.Millisecond))
				_, err := pipeline.Do(t.Context(), p, hang)
				return err
			},
			says:  []string{"gave up after 3 attempts", "attempt timeout (5ms) exceeded: context deadline exceeded"},
			is:    []error{pipeline.ErrAttemptTimeout, context.DeadlineExceeded, retrypolicy.ErrMaxAttempts},
			isNot: []error{retrypolicy.ErrOutOfTime},
		},
		{
			name: "time budget",
			call: func() error {
				p := pipeline.New(pipeline.WithTimeBudget(20*time.Millisecond), pipeline.WithRetry(fast))
				_, err := pipeline.Do(t.Context(), p, hang)
				return err
			},
			says:  []string{"time budget exhausted"},
			is:    []error{retrypolicy.ErrOutOfTime, context.DeadlineExceeded},
			isNot: []error{pipeline.ErrAttemptTimeout},
		},
		{
			name: "POST without an idempotency key",
			call: func() error {
				before := requests.Load()
				c := httpclient.New(httpclient.WithPipeline(pipeline.New(pipeline.WithRetry(fast))))
				err := c.PostJSON(t.Context(), srv.URL+"/busy", map[string]int{"n": 1}, nil)
				if n := requests.Load() - before; n != 1 {
					t.Errorf("the server saw %d requests, want 1", n)
				}
				return err
			},
			says: []string{"POST " + srv.URL + "/busy: 503 Service Unavailable", "not retried: POST without Idempotency-Key"},
			is:   []error{httpclient.ErrNoIdempotencyKey},
		},
		{
			name: "POST with a key: retried, no such note",
			call: func() error {
				c := httpclient.New(httpclient.WithPipeline(pipeline.New(pipeline.WithRetry(fast))))
				err := c.PostJSON(t.Context(), srv.URL+"/busy", map[string]int{"n": 1}, nil, httpclient.IdempotencyKey("k-1"))
				if err != nil && strings.Contains(err.Error(), "not retried") {
					t.Errorf("a request with a key says %q", err)
				}
				return err
			},
			says:  []string{"gave up after 3 attempts", "503 Service Unavailable"},
			isNot: []error{httpclient.ErrNoIdempotencyKey},
		},
		{
			name: "status and host",
			call: func() error {
				return httpclient.New().GetJSON(t.Context(), srv.URL+"/missing", nil)
			},
			says:  []string{"GET", host, "404 Not Found"},
			isNot: []error{httpclient.ErrNoIdempotencyKey},
		},
		{
			name: "open breaker",
			call: func() error {
				b := breaker.New("payments", breaker.ConsecutiveFailures(1))
				p := pipeline.New(pipeline.WithBreaker(b))
				_, _ = pipeline.Do(t.Context(), p, func(context.Context) (int, error) { return 0, errors.New("down") })
				_, err := pipeline.Do(t.Context(), p, func(context.Context) (int, error) { return 1, nil })
				return err
			},
			says: []string{`breaker "payments": circuit breaker is open`},
			is:   []error{breaker.ErrOpen},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if err == nil {
				t.Fatal("no error")
			}
			for _, s := range tc.says {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %q", err, s)
				}
			}
			for _, target := range tc.is {
				if !errors.Is(err, target) {
					t.Errorf("error %q does not match %v", err, target)
				}
			}
			for _, target := range tc.isNot {
				if errors.Is(err, target) {
					t.Errorf("error %q matches %v", err, target)
				}
			}
		})
	}
}

// TestPipelineWithoutRetryIsNoted: a client given a pipeline without a
// retry stage sends every request once; it says so when it is made.
func TestPipelineWithoutRetryIsNoted(t *testing.T) {
	var buf bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	defer slog.SetDefault(prev)

	httpclient.New(httpclient.WithPipeline(pipeline.New(pipeline.WithRetry(retrypolicy.New()))))
	if buf.Len() != 0 {
		t.Errorf("a pipeline with a retry stage is noted: %s", buf.String())
	}
	httpclient.New(httpclient.WithPipeline(pipeline.New(pipeline.WithBreaker(breaker.New("orders")))))
	if !strings.Contains(buf.String(), "the pipeline has no retry stage (pipeline.WithRetry): every request is sent once") {
		t.Errorf("a pipeline without a retry stage is not noted; logged %q", buf.String())
	}
}

// TestAttemptTimeoutOverHTTPIsADeadline: net/http returns the attempt
// context's cause as it is; it still matches context.DeadlineExceeded and
// is a timeout, so retrysignal answers 504 for it, as for any timeout.
func TestAttemptTimeoutOverHTTPIsADeadline(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(2 * time.Second):
		}
	}))
	defer srv.Close()
	c := httpclient.New(httpclient.WithPipeline(pipeline.New(
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(2), retrypolicy.BaseDelay(time.Millisecond))),
		pipeline.WithAttemptTimeout(50*time.Millisecond))))
	err := c.GetJSON(t.Context(), srv.URL, nil)
	require.Error(t, err)
	assert.ErrorIs(t, err, pipeline.ErrAttemptTimeout)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	var ne interface{ Timeout() bool }
	require.ErrorAs(t, err, &ne)
	assert.True(t, ne.Timeout())
	assert.Equal(t, http.StatusGatewayTimeout, retrysignal.Status(err))
}
