package retrysignal_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/deadline"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/retrysignal"
)

// Handler's doc: an error "that came out of a resilient outbound call,
// whose retries were made (...: [Retried]), is answered by WriteError,
// with the signal; another, such as a plain http.Client's, in the same
// way but without the signal, so that the caller may retry what nobody
// below did"; docs/retries.md: "(a review: a plain client's one 503
// failed the call)". A resilient client that made one attempt, and no
// retry (a POST without an idempotency key; a pipeline of one attempt),
// returns a classed error all the same: Handler signals "don't retry",
// the caller's httpclient (which trusts a loopback service) does not
// retry, and the user's call fails on one 503 that nobody retried. With
// a plain http.Client in the middle, the same chain completes.
func TestReview22SignalForACallNobodyRetried(t *testing.T) {
	cases := []struct {
		name   string
		middle func(ctx context.Context, url string) error
	}{
		{"plain_client", func(ctx context.Context, url string) error {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return errors.New("orders: " + resp.Status)
			}
			return nil
		}},
		{"post_without_key", func(ctx context.Context, url string) error {
			return httpclient.New().PostJSON(ctx, url, map[string]int{"n": 1}, nil)
		}},
		{"one_attempt_pipeline", func(ctx context.Context, url string) error {
			c := httpclient.New(httpclient.WithPipeline(pipeline.New(pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(1))))))
			return c.GetJSON(ctx, url, nil)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int64
			d := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if calls.Add(1) == 1 {
					w.WriteHeader(http.StatusServiceUnavailable) // one 503, then healthy
					return
				}
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write([]byte("{}"))
			}))
			defer d.Close()
			b := httptest.NewServer(deadline.Middleware(retrysignal.Middleware(retrysignal.Handler(func(w http.ResponseWriter, r *http.Request) error {
				if err := tc.middle(r.Context(), d.URL); err != nil {
					return err
				}
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write([]byte("{}"))
				return nil
			}))))
			defer b.Close()

			a := httpclient.New(httpclient.WithPipeline(pipeline.New(pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(time.Millisecond))))))
			err := a.GetJSON(context.Background(), b.URL, nil)
			t.Logf("%s: user's call: %v; D called %d times", tc.name, err, calls.Load())
			assert.NoError(t, err, "one 503 that nobody below retried fails the user's call")
		})
	}
}

// The other side of Retried: a service that calls its dependency through
// httpclient's Transport, as an SDK does ("so any *http.Client or SDK can
// use it"), gets the last answer after the Transport's retries as a
// response, not an error, and the SDK makes an error of its own from it,
// with no resilience class. Handler then answers without the signal (it
// did before the change), and the caller retries what the Transport
// already retried: D gets 4 x 4 = 16 requests per user request instead
// of 4, the multiplication the package exists to stop.
func TestReview22TransportRetriesLoseTheSignal(t *testing.T) {
	var calls atomic.Int64
	d := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer d.Close()
	fast := func() *pipeline.Pipeline {
		return pipeline.New(pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(time.Millisecond), retrypolicy.MaxDelay(2*time.Millisecond))))
	}
	sdk := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(fast()))} // 4 attempts
	b := httptest.NewServer(deadline.Middleware(retrysignal.Middleware(retrysignal.Handler(func(w http.ResponseWriter, r *http.Request) error {
		req, _ := http.NewRequestWithContext(r.Context(), http.MethodGet, d.URL, nil)
		resp, err := sdk.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			// An SDK's own error type, marked as what the layer below
			// retried, as Handler's doc says to.
			return resilience.Terminal(errors.New("inventory sdk: " + resp.Status))
		}
		return nil
	}))))
	defer b.Close()
	a := httpclient.New(httpclient.WithPipeline(fast())) // 4 attempts, trusts B (loopback)
	err := a.GetJSON(context.Background(), b.URL, nil)
	require.Error(t, err)
	t.Logf("D requests for one user request: %d (user's error: %v)", calls.Load(), err)
	assert.LessOrEqual(t, calls.Load(), int64(4), "retries at one layer only")
}
