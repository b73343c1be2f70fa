package httpclient_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
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
)

// TestReview35ChainShortBudgetsWarmBreakerHolds: A -> B -> C over real
// HTTP servers. C answers in 200 ms. B (deadline.Middleware) calls C
// through a pipeline with a default breaker and a retry policy. Once B
// has seen C answer (warm), 20 requests from A, 10 at a time, with 150 ms
// budgets (A's pipeline time budget: A hangs up at its deadline) run out
// of time at B; B's breaker must stay closed, and then serve a request
// without a deadline. Also: A's budget of 5 ms (the original issue).
func TestReview35ChainShortBudgetsWarmBreakerHolds(t *testing.T) {
	c := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(200 * time.Millisecond):
			_, _ = io.WriteString(w, "{}")
		case <-r.Context().Done():
		}
	}))
	defer c.Close()

	bb := breaker.New("C")
	toC := httpclient.New(httpclient.WithPipeline(pipeline.New(pipeline.WithBreaker(bb),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(time.Millisecond))))))
	b := httptest.NewServer(deadline.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := toC.GetJSON(r.Context(), c.URL, nil); err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		_, _ = io.WriteString(w, "{}")
	})))
	defer b.Close()

	// Warm: two answers of C, timed.
	for range 2 {
		require.NoError(t, toC.GetJSON(context.Background(), c.URL, nil))
	}

	for _, budget := range []time.Duration{5 * time.Millisecond, 150 * time.Millisecond} {
		toB := httpclient.New(httpclient.WithPipeline(pipeline.New(pipeline.WithTimeBudget(budget))))
		var wg sync.WaitGroup
		for range 2 {
			for range 10 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					assert.Error(t, toB.GetJSON(context.Background(), b.URL, nil))
				}()
			}
			wg.Wait()
		}
		time.Sleep(300 * time.Millisecond) // B's calls to C end
		assert.Equal(t, resilience.StateClosed, bb.State(), "budget %v: B's breaker, counts %+v", budget, bb.Counts())
	}
	require.NoError(t, httpclient.New().GetJSON(context.Background(), b.URL, nil))
}
