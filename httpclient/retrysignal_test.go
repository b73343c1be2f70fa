package httpclient_test

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/retrysignal"
)

func TestEachAttemptSaysWhichItIs(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Method+" "+r.Header.Get(retrysignal.AttemptHeader))
		mu.Unlock()
		http.Error(w, "busy", http.StatusServiceUnavailable)
	}))
	c := httpclient.New(fastRetry())
	_ = c.GetJSON(t.Context(), srv.URL, nil)
	_ = c.PostJSON(t.Context(), srv.URL, map[string]int{}, nil) // no key: one attempt
	assert.Equal(t, []string{"GET 1/4", "GET 2/4", "GET 3/4", "GET 4/4", "POST 1/1"}, seen)
}

// TestNoRetryAnswerIsTerminal: a trusted service's "don't retry" answer is
// not retried, its Retry-After is ignored, and it still counts against
// the breaker; an untrusted one's is retried as any 503.
func TestNoRetryAnswerIsTerminal(t *testing.T) {
	var calls atomic.Int64
	srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set(retrysignal.NoRetryHeader, "1")
		w.Header().Set("Retry-After", "1")
		http.Error(w, "busy", http.StatusServiceUnavailable)
	}))
	b := breaker.New("dep", breaker.ConsecutiveFailures(2))
	start := time.Now()
	err := httpclient.New(fastRetry(pipeline.WithBreaker(b))).GetJSON(t.Context(), srv.URL, nil)
	var se *httpclient.StatusError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, http.StatusServiceUnavailable, se.StatusCode, "503 stays 503")
	assert.Equal(t, resilience.ClassTerminal, resilience.Classify(err))
	assert.EqualValues(t, 1, calls.Load(), "not retried")
	assert.Less(t, time.Since(start), 500*time.Millisecond, "Retry-After not waited for")
	assert.EqualValues(t, 1, b.Counts().TotalFailures, "a breaker failure")

	calls.Store(0)
	untrusting := httpclient.New(httpclient.TrustNoRetry(func(*url.URL) bool { return false }), httpclient.WithPipeline(pipeline.New(
		pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(time.Millisecond), retrypolicy.MaxDelay(5*time.Millisecond))))))
	_ = untrusting.GetJSON(t.Context(), srv.URL, nil)
	assert.EqualValues(t, 4, calls.Load(), "an untrusted signal changes nothing")
}

// TestNoRetryPassesUpAChain: B calls C, which fails after its retries and
// says so; B, a service in between, answers its own caller with the
// signal, through retrysignal.Handler.
func TestNoRetryPassesUpAChain(t *testing.T) {
	var cCalls atomic.Int64
	c := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cCalls.Add(1)
		http.Error(w, "down", http.StatusServiceUnavailable)
	}))
	client := httpclient.New(fastRetry())
	b := newServer(t, retrysignal.Handler(func(w http.ResponseWriter, r *http.Request) error {
		return client.GetJSON(r.Context(), c.URL, nil)
	}))
	var bCalls atomic.Int64
	counted := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		bCalls.Add(1)
		resp, err := http.Get(b.URL)
		if err != nil {
			return
		}
		defer resp.Body.Close()
		for k, vs := range resp.Header {
			w.Header()[k] = vs
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	}))
	err := httpclient.New(fastRetry()).GetJSON(t.Context(), counted.URL, nil)
	require.Error(t, err)
	assert.EqualValues(t, 1, bCalls.Load(), "A did not retry B")
	assert.EqualValues(t, 4, cCalls.Load(), "B retried C: one layer retries")
	assert.True(t, strings.Contains(err.Error(), "503"), err.Error())
}

// TestNoRetryOnACallerErrorIsNoBreakerFailure: a trusted "don't retry" 404
// stays the caller's fault.
func TestNoRetryOnACallerErrorIsNoBreakerFailure(t *testing.T) {
	srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(retrysignal.NoRetryHeader, "1")
		http.Error(w, "no such order", http.StatusNotFound)
	}))
	b := breaker.New("dep", breaker.ConsecutiveFailures(1))
	err := httpclient.New(fastRetry(pipeline.WithBreaker(b))).GetJSON(t.Context(), srv.URL, nil)
	assert.True(t, resilience.IsPermanent(err))
	assert.Equal(t, resilience.StateClosed, b.State())
}

// TestAProbeSaysItIsTheOnlyAttempt: a call let through a half-open breaker
// makes one attempt, and says so.
func TestAProbeSaysItIsTheOnlyAttempt(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get(retrysignal.AttemptHeader))
		mu.Unlock()
		http.Error(w, "busy", http.StatusServiceUnavailable)
	}))
	b := breaker.New("dep", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(20*time.Millisecond))
	c := httpclient.New(fastRetry(pipeline.WithBreaker(b)))
	_ = c.GetJSON(t.Context(), srv.URL, nil)
	time.Sleep(40 * time.Millisecond)
	_ = c.GetJSON(t.Context(), srv.URL, nil)
	assert.Equal(t, []string{"1/4", "2/4", "3/4", "4/4", "1/1"}, seen)
}
