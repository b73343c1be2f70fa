package deadline_test

import (
	"io"
	"net/http"
	"net/http/httptest"
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

// A service behind Middleware whose dependency answers in 30 ms: callers
// upstream that send budgets of 5 ms get 504, and the service's breaker
// does not count their calls, so that the callers with time enough are
// served.
func TestShortBudgetsFromUpstreamDoNotOpenTheBreaker(t *testing.T) {
	dep := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(30 * time.Millisecond):
			_, _ = io.WriteString(w, "stock: 3")
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(dep.Close)
	b := breaker.New("stock") // 5 failures in a row
	client := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(
		pipeline.New(pipeline.WithBreaker(b), pipeline.WithRetry(retrypolicy.New()))))}
	svc := httptest.NewServer(deadline.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, _ := http.NewRequestWithContext(r.Context(), http.MethodGet, dep.URL, nil)
		resp, err := client.Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusGatewayTimeout)
			return
		}
		defer resp.Body.Close()
		_, _ = io.Copy(w, resp.Body)
	})))
	t.Cleanup(svc.Close)
	get := func(budget string) int {
		req, _ := http.NewRequest(http.MethodGet, svc.URL, nil)
		if budget != "" {
			req.Header.Set(deadline.Header, budget)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusOK, get(""))
	for range 20 {
		assert.Equal(t, http.StatusGatewayTimeout, get("5"))
	}
	assert.Equal(t, resilience.StateClosed, b.State(), "counts %+v", b.Counts())
	for range 10 {
		assert.Equal(t, http.StatusOK, get(""), "a caller with time enough is served")
		assert.Equal(t, http.StatusOK, get("1000"))
	}
}
