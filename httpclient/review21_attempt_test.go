package httpclient_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
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

// The Request-Attempt header says "n/max", max "the most attempts the
// caller makes". The Transport takes max from Pipeline.MaxAttempts before
// the call, which says 1 while the breaker is not closed. A call that
// waits for the breaker (pipeline.WaitWhenOpen) and is let through once
// another call's probe closed it makes all its attempts: the first says
// "1/1" (its caller will not retry: it will), the next "2/1", which
// retrysignal.ParseAttempt rejects (n > max), so the server sees no
// attempt at all.
func TestReview21AttemptHeaderOfACallThatWaitedForTheBreaker(t *testing.T) {
	var (
		mu       sync.Mutex
		xHeaders []string
		xCalls   atomic.Int64
		healthy  atomic.Bool
	)
	srv := httptest.NewServer(retrysignal.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/x":
			a, ok := retrysignal.FromContext(r.Context())
			mu.Lock()
			xHeaders = append(xHeaders, r.Header.Get(retrysignal.AttemptHeader))
			mu.Unlock()
			if !ok {
				t.Logf("x: Request-Attempt %q not understood by retrysignal.Middleware", r.Header.Get(retrysignal.AttemptHeader))
			} else {
				t.Logf("x: attempt %+v, WillRetry %v", a, a.WillRetry())
			}
			if xCalls.Add(1) == 1 {
				http.Error(w, "blip", http.StatusServiceUnavailable)
				return
			}
		default:
			if !healthy.Load() {
				http.Error(w, "down", http.StatusServiceUnavailable)
				return
			}
		}
		_, _ = io.WriteString(w, `"ok"`)
	})))
	defer srv.Close()

	brk := breaker.New("srv", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(300*time.Millisecond))
	c := httpclient.New(httpclient.WithPipeline(pipeline.New(
		pipeline.WithBreaker(brk), pipeline.WaitWhenOpen(),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond), retrypolicy.MaxDelay(2*time.Millisecond))),
	)))
	bg := context.Background()
	var out string
	require.Error(t, c.GetJSON(bg, srv.URL+"/open", &out))
	require.Equal(t, resilience.StateOpen, brk.State())
	healthy.Store(true)

	// y waits with the most time left: it is the probe. x waits behind it.
	var wg sync.WaitGroup
	wg.Add(2)
	var yErr, xErr error
	go func() {
		defer wg.Done()
		ctx, cancel := context.WithTimeout(bg, 10*time.Second)
		defer cancel()
		var o string
		yErr = c.GetJSON(ctx, srv.URL+"/y", &o)
	}()
	time.Sleep(20 * time.Millisecond)
	go func() {
		defer wg.Done()
		ctx, cancel := context.WithTimeout(bg, 5*time.Second)
		defer cancel()
		var o string
		xErr = c.GetJSON(ctx, srv.URL+"/x", &o)
	}()
	wg.Wait()
	require.NoError(t, yErr)
	require.NoError(t, xErr, "x rode out its blip by a retry")
	mu.Lock()
	defer mu.Unlock()
	t.Logf("x's Request-Attempt headers: %q", xHeaders)
	require.Len(t, xHeaders, 2)
	for i, h := range xHeaders {
		a, ok := retrysignal.ParseAttempt(h)
		assert.True(t, ok, "attempt %d's header %q must parse", i+1, h)
		assert.Equal(t, i+1, a.N)
		if i == 0 {
			assert.True(t, a.WillRetry(), "the first attempt was retried: its header must not say its caller will not retry (%q)", h)
		}
	}
}
