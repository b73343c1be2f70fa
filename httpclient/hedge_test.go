package httpclient_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/retrysignal"
)

// TestHedgedRequests: a GET whose first attempt hangs gets the answer of
// its hedge; the hung attempt is canceled, and the answers not returned
// are closed, so every connection goes back to the pool or away.
func TestHedgedRequests(t *testing.T) {
	var n, canceled atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch n.Add(1) {
		case 1:
			select {
			case <-r.Context().Done():
				canceled.Add(1)
			case <-time.After(5 * time.Second):
			}
			return
		case 3, 4: // later requests: a failure, then a success, at once
			if r.URL.Query().Get("fail") != "" {
				w.WriteHeader(http.StatusServiceUnavailable)
				_, _ = io.WriteString(w, "busy")
				return
			}
		}
		_, _ = io.WriteString(w, "ok")
	}))
	defer srv.Close()
	base := &http.Transport{}
	defer base.CloseIdleConnections()
	client := &http.Client{Transport: httpclient.NewTransport(httpclient.Base(base), httpclient.WithPipeline(pipeline.New(
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(2))),
		pipeline.WithHedging(hedge.New(hedge.Delay(50*time.Millisecond)))))),
	}

	start := time.Now()
	resp, err := client.Get(srv.URL)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, "ok", string(body))
	assert.Less(t, time.Since(start), 2*time.Second, "the hedge's answer, not the hung one's")
	assert.Eventually(t, func() bool { return canceled.Load() == 1 }, 5*time.Second, 10*time.Millisecond,
		"the hung attempt is canceled")

	resp, err = client.Get(srv.URL + "?fail=1") // 3 fails at once, no hedge: retried as 4, which fails too
	require.NoError(t, err)
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, "busy", string(body), "the last answer comes back whole")
}

// TestHedgeSaysItIsAHedge: a hedge carries the number of the attempt it
// twins, marked as a hedge, which retrysignal's middleware reads: never a
// number past the most attempts.
func TestHedgeSaysItIsAHedge(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	var n atomic.Int64
	srv := httptest.NewServer(retrysignal.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, ok := retrysignal.FromContext(r.Context())
		mu.Lock()
		seen = append(seen, fmt.Sprintf("%s parsed=%v", r.Header.Get(retrysignal.AttemptHeader), ok && a.N <= a.Max))
		mu.Unlock()
		if i := n.Add(1); i <= 2 { // the first attempt is slow, its hedge too, both fail: a retry follows
			time.Sleep(time.Duration(3-i) * 40 * time.Millisecond)
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok")
	})))
	defer srv.Close()
	client := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(pipeline.New(
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(2), retrypolicy.BaseDelay(time.Millisecond))),
		pipeline.WithHedging(hedge.New(hedge.Delay(30*time.Millisecond))))))}
	resp, err := client.Get(srv.URL)
	require.NoError(t, err)
	resp.Body.Close()
	mu.Lock()
	defer mu.Unlock()
	require.GreaterOrEqual(t, len(seen), 3)
	assert.Equal(t, []string{"1/2 parsed=true", "1/2; hedge parsed=true", "2/2 parsed=true"}, seen[:3])
}

// TestAnOuterHedgeIsNotThisTransports: a hedge of an outer pipeline (a
// handler's own call, hedged) whose operation makes a request through a
// Transport of its own pipeline: that request's attempts are numbered as
// its own, not marked as hedges of the outer call's.
func TestAnOuterHedgeIsNotThisTransports(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get(retrysignal.AttemptHeader))
		mu.Unlock()
		_, _ = io.WriteString(w, "ok")
	}))
	defer srv.Close()
	client := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(pipeline.New(
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3))))))}
	outer := pipeline.New(pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxShare(1))))
	var first sync.Once
	_, err := pipeline.Do(t.Context(), outer, func(ctx context.Context) (string, error) {
		hung := false
		first.Do(func() { hung = true })
		if hung { // the outer call's first attempt: it hangs until the hedge wins
			<-ctx.Done()
			return "", ctx.Err()
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		if err != nil {
			return "", err
		}
		resp, err := client.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	})
	require.NoError(t, err)
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{"1/3"}, seen, "the inner request's first attempt, not a hedge")
}

// TestAHedgedFailureSaysItWasRetried: with one attempt and hedging, a
// request whose hedge was sent reached the server twice, as a retry
// would: its failed answer carries the "don't retry" signal, so that a
// proxy's caller does not send it twice more. One whose answer came
// before its hedge was due carries none.
func TestAHedgedFailureSaysItWasRetried(t *testing.T) {
	for _, tc := range []struct {
		name         string
		delay, takes time.Duration
		sent         int64
		signal       string
	}{
		{"hedged", 20 * time.Millisecond, 150 * time.Millisecond, 2, "1"},
		{"not hedged", 5 * time.Second, 0, 1, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var n atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n.Add(1)
				time.Sleep(tc.takes)
				w.WriteHeader(http.StatusServiceUnavailable)
			}))
			defer srv.Close()
			base := &http.Transport{}
			defer base.CloseIdleConnections()
			client := &http.Client{Transport: httpclient.NewTransport(httpclient.Base(base), httpclient.WithPipeline(pipeline.New(
				pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(1))),
				pipeline.WithHedging(hedge.New(hedge.Delay(tc.delay)))))),
			}
			resp, err := client.Get(srv.URL)
			require.NoError(t, err)
			resp.Body.Close()
			assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
			assert.Equal(t, tc.sent, n.Load())
			assert.Equal(t, tc.signal, resp.Header.Get(retrysignal.NoRetryHeader))
		})
	}
}
