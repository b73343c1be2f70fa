package retrysignal_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/retrysignal"
)

// r26Chain: a dependency dep, a service whose retrysignal.Handler calls it
// through client, and returns the answer the caller gets plus the requests
// dep saw.
func r26Chain(t *testing.T, dep http.HandlerFunc, call func(ctx context.Context, url string) error) (*http.Response, int32) {
	t.Helper()
	var hits atomic.Int32
	d := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		dep(w, r)
	}))
	defer d.Close()
	svc := httptest.NewServer(retrysignal.Handler(func(w http.ResponseWriter, r *http.Request) error {
		return call(r.Context(), d.URL)
	}))
	defer svc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, svc.URL, nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	return resp, hits.Load()
}

// Handler: "one attempt that nobody retried (a POST without an idempotency
// key), is answered in the same way but without the signal, so that the
// caller may retry what nobody below did". A POST without a key whose one
// attempt outlived the pipeline's own time budget (shorter than the
// caller's) was retried by nobody.
func TestReview26_PostWithoutKeyOverBudgetGetsNoSignal(t *testing.T) {
	p := pipeline.New(pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3))), pipeline.WithTimeBudget(100*time.Millisecond))
	c := httpclient.New(httpclient.WithPipeline(p))
	resp, hits := r26Chain(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(400 * time.Millisecond):
		case <-r.Context().Done():
		}
		w.WriteHeader(http.StatusServiceUnavailable)
	}, func(ctx context.Context, url string) error {
		err := c.PostJSON(ctx, url, map[string]int{"a": 1}, nil)
		var re *retrypolicy.Error
		if errors.As(err, &re) {
			t.Logf("error: %v (attempts %d, reason %v)", err, re.Attempts, re.Reason)
		} else {
			t.Logf("error: %v", err)
		}
		return err
	})
	t.Logf("status %d, %s=%q, dependency saw %d", resp.StatusCode, retrysignal.NoRetryHeader, resp.Header.Get(retrysignal.NoRetryHeader), hits)
	assert.Equal(t, int32(1), hits)
	assert.Empty(t, resp.Header.Get(retrysignal.NoRetryHeader), "a POST that nobody retried was answered with the no-retry signal")
}

// Retried: one attempt "that nobody retried ... is not" a retried call.
// The dependency's idempotency middleware answers the key's repeat 409
// with Retry-After: 1 while the first request runs (for 1 s). The
// service's call, its pipeline budget 300 ms, makes one attempt and stops
// (the Retry-After is past its budget); the caller, with 5 s, would retry
// after the Retry-After and get the answer, as it does through a plain
// chain. Is it told not to?
func TestReview26_Conflict409RetryAfterPastBudgetSignalled(t *testing.T) {
	r26Conflict(t, true)
}

// The caller's delays are without jitter (200, 400, 800 ms...), so that
// its retries outlast the key's first request (1 s) in every run.
//
// The control: the same chain, the caller ignoring the signal (as it would
// without it), completes the call.
func TestReview26_Conflict409RetryAfterControlWithoutSignal(t *testing.T) {
	r26Conflict(t, false)
}

func r26Conflict(t *testing.T, trust bool) {
	start := time.Now()
	var hits atomic.Int32
	dep := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if time.Since(start) < time.Second {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusConflict)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	defer dep.Close()
	p := pipeline.New(pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3))), pipeline.WithTimeBudget(300*time.Millisecond))
	svcClient := httpclient.New(httpclient.WithPipeline(p))
	var svcErrs []string
	var mu sync.Mutex
	svc := httptest.NewServer(retrysignal.Handler(func(w http.ResponseWriter, r *http.Request) error {
		err := svcClient.PostJSON(r.Context(), dep.URL, map[string]int{"a": 1}, nil, httpclient.IdempotencyKey(r.Header.Get("Idempotency-Key")))
		if err == nil {
			w.WriteHeader(http.StatusOK)
			return nil
		}
		mu.Lock()
		var re *retrypolicy.Error
		if errors.As(err, &re) {
			svcErrs = append(svcErrs, fmt.Sprintf("%v (attempts %d)", err, re.Attempts))
		} else {
			svcErrs = append(svcErrs, err.Error())
		}
		mu.Unlock()
		return err
	}))
	defer svc.Close()
	caller := httpclient.New(httpclient.WithPipeline(pipeline.New(pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(6), retrypolicy.BaseDelay(200*time.Millisecond), retrypolicy.Jitter(retrypolicy.None))), pipeline.WithTimeBudget(5*time.Second))), httpclient.TrustNoRetry(func(*url.URL) bool { return trust }))
	err := caller.PostJSON(context.Background(), svc.URL, map[string]int{"a": 1}, nil, httpclient.IdempotencyKey("k1"))
	mu.Lock()
	t.Logf("service errors: %q; dependency saw %d; caller err after %v: %v", svcErrs, hits.Load(), time.Since(start).Round(time.Millisecond), err)
	mu.Unlock()
	assert.NoError(t, err, "the caller was told not to retry a call nobody below retried; a plain chain completes it")
}
