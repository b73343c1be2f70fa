package httpclient_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// A keyed request whose first still runs, longer than the call's retries
// last: every attempt gets package idempotency's 409 "in progress" with a
// Retry-After. The call fails with it, retried, and the breaker counts it
// neither way: a healthy dependency's answer (resilience.ClassPending).
func TestInProgressToTheEndIsNoFailure(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		w.Header().Set("Retry-After", "0")
		w.WriteHeader(http.StatusConflict)
	}))
	defer srv.Close()
	b := breaker.New("pending", breaker.ConsecutiveFailures(1))
	c := httpclient.New(httpclient.WithPipeline(pipeline.New(pipeline.WithBreaker(b),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(0))))))
	for range 3 {
		err := c.PostJSON(context.Background(), srv.URL, map[string]int{"a": 1}, nil, httpclient.IdempotencyKey("k"))
		var se *httpclient.StatusError
		require.True(t, errors.As(err, &se), "err %v", err)
		assert.Equal(t, http.StatusConflict, se.StatusCode)
		assert.Equal(t, resilience.ClassPending, resilience.Classify(err))
	}
	assert.EqualValues(t, 9, n.Load(), "each call's 409s retried")
	assert.Equal(t, resilience.StateClosed, b.State())
	assert.Zero(t, b.Counts().TotalFailures)
}
