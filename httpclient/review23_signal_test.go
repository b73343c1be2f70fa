package httpclient_test

// Review 23: retrysignal.Handler's NoteRetried (59af432), told by the
// Transport; and the caller's deadline that the pipeline no longer counts
// (94fd901), end to end through deadline.Middleware.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/deadline"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/retrysignal"
)

// A handler looks a user up in a cache service through httpclient (a 404
// is a miss, an ordinary answer that it handles), then asks its database
// service with a plain http.Client, which fails once with a 503 that
// nobody retried. retrysignal.Handler's doc: "Another, such as a plain
// http.Client's, ... is answered in the same way but without the signal,
// so that the caller may retry what nobody below did". The 404 noted the
// request as retried (NoteRetried: Retried says yes of a 404's error), and
// the plain 503 goes back with No-Retry: the caller upstream does not
// retry, and its user's call fails on a one-off blip.
func TestReview23AMissMarksEveryLaterFailureRetried(t *testing.T) {
	cache := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no such key", http.StatusNotFound)
	}))
	defer cache.Close()
	var dbCalls atomic.Int64
	db := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if dbCalls.Add(1) == 1 {
			http.Error(w, "blip", http.StatusServiceUnavailable) // once
			return
		}
		fmt.Fprint(w, "user 7")
	}))
	defer db.Close()

	resilient := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(
		pipeline.New(pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond))))))}
	plain := &http.Client{}
	svc := httptest.NewServer(retrysignal.Handler(func(w http.ResponseWriter, r *http.Request) error {
		req, _ := http.NewRequestWithContext(r.Context(), http.MethodGet, cache.URL+"/user/7", nil)
		resp, err := resilient.Do(req)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			fmt.Fprint(w, "cached")
			return nil
		}
		// A miss: ask the database, with a plain client.
		req, _ = http.NewRequestWithContext(r.Context(), http.MethodGet, db.URL+"/user/7", nil)
		resp, err = plain.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("db: %s", resp.Status) // nobody retried it
		}
		_, err = io.Copy(w, resp.Body)
		return err
	}))
	defer svc.Close()

	// What the handler's answer says.
	resp, err := http.Get(svc.URL)
	require.NoError(t, err)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	t.Logf("answer: %d, No-Retry %q", resp.StatusCode, resp.Header.Get(retrysignal.NoRetryHeader))
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.Empty(t, resp.Header.Get(retrysignal.NoRetryHeader), "the 503 came from a plain client that nobody retried: no signal")

	// Its effect: the caller upstream, a resilient client, gives up on a
	// blip a retry would have got past.
	dbCalls.Store(0)
	upstream := httpclient.New(httpclient.WithPipeline(pipeline.New(pipeline.WithRetry(
		retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond))))))
	var got string
	err = upstream.GetJSON(context.Background(), svc.URL, &got)
	t.Logf("upstream call: %v; db got %d requests", err, dbCalls.Load())
	var se *httpclient.StatusError
	if errors.As(err, &se) {
		assert.Fail(t, "the upstream call failed on a one-off 503 that nobody retried", "status %d", se.StatusCode)
	}
}

// End to end, with deadline.Middleware: a caller upstream sends
// Request-Timeout-Ms: 70 (its time left); this service's pipeline has an
// attempt timeout of a second, as deadline's doc advises; its dependency
// answers every request with a 503 in 20 ms. The breaker never opens: each
// call's last attempt is ended by the caller's deadline, and the call is
// no longer counted, however many 503s the dependency gave.
func TestReview23A503ingDependencyBehindDeadlineMiddleware(t *testing.T) {
	var depCalls atomic.Int64
	dep := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		depCalls.Add(1)
		time.Sleep(20 * time.Millisecond)
		http.Error(w, "overloaded", http.StatusServiceUnavailable)
	}))
	defer dep.Close()
	b := breaker.New("review23-dep", breaker.ConsecutiveFailures(5), breaker.OpenTimeout(time.Minute))
	c := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(pipeline.New(
		pipeline.WithBreaker(b),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(10), retrypolicy.BaseDelay(time.Millisecond), retrypolicy.MaxDelay(2*time.Millisecond))),
		pipeline.WithAttemptTimeout(time.Second),
	)))}
	svc := httptest.NewServer(deadline.Middleware(retrysignal.Handler(func(w http.ResponseWriter, r *http.Request) error {
		req, _ := http.NewRequestWithContext(r.Context(), http.MethodGet, dep.URL, nil)
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		w.WriteHeader(resp.StatusCode)
		return nil
	})))
	defer svc.Close()
	for range 20 {
		req, _ := http.NewRequest(http.MethodGet, svc.URL, nil)
		req.Header.Set(deadline.Header, "70")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	t.Logf("the dependency got %d requests and answered every one 503; breaker %v, counts %+v", depCalls.Load(), b.State(), b.Counts())
	assert.Equal(t, resilience.StateOpen, b.State(), "a dependency answering nothing but 503s must open the breaker")
}
