package httpclient_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
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
	"github.com/resiliencekit/resiliencekit/retrysignal"
)

// review32: the scenario one hop further, through the toolkit's
// own pieces. Upstream A sends service B a 5 ms budget (deadline
// header); B's breaker guards its calls to service C, which answers in
// 30 ms (C calls D, which takes 30 ms). B forwards the budget to C
// (httpclient injects it, rounded DOWN to whole milliseconds), C's
// deadline.Middleware ends C's call to D at C's deadline, and C answers
// 504 (retrysignal's status for a call out of time). Since C's deadline
// is up to a millisecond earlier than B's, the 504 reaches B before B's
// own deadline: B's context is not done, so the breaker's cut-short rule
// does not apply, and the 504 (transient) is counted as C's failure.
// Five such requests open B's breaker on C, which then fails B's other
// requests, which C would answer in 30 ms.
func TestReview32DownstreamBudget504OpensBreaker(t *testing.T) {
	for _, budget := range []time.Duration{time.Millisecond, 5 * time.Millisecond} {
		t.Run(budget.String(), func(t *testing.T) { downstreamBudget(t, budget) })
	}
}

func downstreamBudget(t *testing.T, budget time.Duration) {
	d := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(30 * time.Millisecond):
			_, _ = io.WriteString(w, "ok")
		}
	}))
	defer d.Close()

	// C: a toolkit service, deadline.Middleware and a resilient client.
	cClient := &http.Client{Transport: httpclient.NewTransport()}
	c := httptest.NewServer(deadline.Middleware(retrysignal.Handler(func(w http.ResponseWriter, r *http.Request) error {
		req, _ := http.NewRequestWithContext(r.Context(), http.MethodGet, d.URL, nil)
		resp, err := cClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		_, err = io.Copy(w, resp.Body)
		return err
	})))
	defer c.Close()

	// B: the service under test, with the default breaker on C.
	onC := breaker.New("C")
	bClient := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(pipeline.New(
		pipeline.WithBreaker(onC),
		pipeline.WithRetry(retrypolicy.New()),
	)))}
	callC := func(ctx context.Context) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.URL, nil)
		resp, err := bClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != http.StatusOK {
			return errors.New(resp.Status)
		}
		return nil
	}
	var mu sync.Mutex
	statuses := map[string]int{}
	b := httptest.NewServer(deadline.Middleware(retrysignal.Handler(func(w http.ResponseWriter, r *http.Request) error {
		err := callC(r.Context())
		if err != nil {
			mu.Lock()
			statuses[err.Error()]++
			mu.Unlock()
		}
		return err
	})))
	defer b.Close()

	ask := func(budget time.Duration) int {
		req, _ := http.NewRequest(http.MethodGet, b.URL, nil)
		if budget > 0 {
			req.Header.Set(deadline.Header, strconv.Itoa(int(budget/time.Millisecond)))
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}

	// C is healthy: B's calls with time enough take 30 ms, and time the
	// breaker's average.
	for range 3 {
		require.Equal(t, http.StatusOK, ask(0))
	}

	// Requests with a short budget (1 ms: B forwards what is left of it,
	// rounded down, so "0"), as many as the and a few more.
	for range 20 {
		ask(budget)
	}
	mu.Lock()
	t.Logf("B's calls to C ended with %v; B's breaker: %v, %+v", statuses, onC.State(), onC.Counts())
	mu.Unlock()

	// A request to B with time enough: a plain client gets C's answer.
	err := callC(context.Background())
	assert.NoError(t, err, "C is healthy: only the upstream's budgets were short")
	assert.False(t, breaker.IsRejection(err), "B's breaker on C rejected a call C would answer in 30 ms")
	assert.Zero(t, onC.Counts().TotalFailures+uint32(boolInt(onC.State() != resilience.StateClosed)),
		"calls cut short by the upstream's budget counted against C")
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
