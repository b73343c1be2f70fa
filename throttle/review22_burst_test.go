package throttle_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/throttle"
)

// Do no harm, end to end: a dependency answers its first two requests
// 503 (it was starting up), then answers everything, each in 200 ms. A
// service's first call retries through the two 503s and succeeds; then 50
// concurrent requests arrive. A plain client completes all 50; with the
// throttle (default K 2, as in the docs) many fail with ErrThrottled,
// which is not retried.
func TestReview22TwoStartupFailuresThenConcurrentCallsToAHealthyDependency(t *testing.T) {
	// warm: one call first, which retries past the two 503s (held), or the
	// two 503s are the first answers of the burst itself (two stale
	// connections reset as a burst begins).
	for _, warm := range []bool{true, false} {
		t.Run(map[bool]string{true: "warm", false: "in_the_burst"}[warm], func(t *testing.T) { twoFailures(t, warm) })
	}
}

func twoFailures(t *testing.T, warm bool) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) <= 2 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		time.Sleep(200 * time.Millisecond)
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()

	p := pipeline.New(
		pipeline.WithThrottle(throttle.New()),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(time.Millisecond))),
	)
	hc := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(p))}

	if warm {
		resp, err := hc.Get(srv.URL)
		require.NoError(t, err, "the first call retries past the two 503s")
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
	}

	var wg sync.WaitGroup
	var throttled, failed atomic.Int64
	for range 50 {
		wg.Go(func() {
			resp, err := hc.Get(srv.URL)
			if err != nil {
				failed.Add(1)
				if errors.Is(err, throttle.ErrThrottled) {
					throttled.Add(1)
				}
				return
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				failed.Add(1)
			}
		})
		time.Sleep(time.Millisecond) // arriving over 50 ms, all out at once
	}
	wg.Wait()
	t.Logf("of 50 concurrent calls to a healthy dependency after two 503s: %d failed, %d with ErrThrottled", failed.Load(), throttled.Load())
	assert.Zero(t, failed.Load(), "a plain client completes all 50")
}
