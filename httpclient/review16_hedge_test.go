package httpclient_test

import (
	"context"
	"fmt"
	"io"
	"net"
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

// activeConns tracks the server's connections in StateActive.
type activeConns struct {
	mu sync.Mutex
	m  map[net.Conn]http.ConnState
}

func (a *activeConns) hook(c net.Conn, s http.ConnState) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.m == nil {
		a.m = map[net.Conn]http.ConnState{}
	}
	if s == http.StateClosed || s == http.StateHijacked {
		delete(a.m, c)
		return
	}
	a.m[c] = s
}

func (a *activeConns) active() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.m)
}

// hedgeServer answers with fn(attempt, hedge).
func hedgeServer(t *testing.T, fn func(w http.ResponseWriter, r *http.Request, a retrysignal.Attempt)) (*httptest.Server, *activeConns) {
	ac := &activeConns{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, _ := retrysignal.ParseAttempt(r.Header.Get(retrysignal.AttemptHeader))
		fn(w, r, a)
	}))
	srv.Config.ConnState = ac.hook
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, ac
}

func hedgedClient(base http.RoundTripper, attempts int, delay time.Duration, extra int) *http.Client {
	return &http.Client{Transport: httpclient.NewTransport(httpclient.Base(base), httpclient.WithPipeline(pipeline.New(
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(attempts), retrypolicy.BaseDelay(time.Millisecond), retrypolicy.MaxDelay(5*time.Millisecond))),
		pipeline.WithHedging(hedge.New(hedge.Delay(delay), hedge.MaxExtra(extra))))))}
}

// TestReview16HedgeBothFailBodyWholeNoLeak: the last attempt and its hedges
// all fail with bodies; the caller reads the one handed back, whole, and no
// server connection stays active.
func TestReview16HedgeBothFailBodyWholeNoLeak(t *testing.T) {
	for _, attempts := range []int{1, 2, 3} {
		t.Run(fmt.Sprint(attempts), func(t *testing.T) {
			srv, ac := hedgeServer(t, func(w http.ResponseWriter, r *http.Request, a retrysignal.Attempt) {
				if !a.Hedge {
					time.Sleep(40 * time.Millisecond)
				}
				w.Header().Set("Retry-After", "0")
				w.WriteHeader(http.StatusServiceUnavailable)
				fmt.Fprintf(w, "attempt %d hedge %v %s", a.N, a.Hedge, make([]byte, 64<<10))
			})
			base := &http.Transport{}
			defer base.CloseIdleConnections()
			c := hedgedClient(base, attempts, 10*time.Millisecond, 3)
			for range 10 {
				resp, err := c.Get(srv.URL)
				require.NoError(t, err)
				b, err := io.ReadAll(resp.Body)
				require.NoError(t, err, "the handed-back body reads whole")
				resp.Body.Close()
				require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
				require.Greater(t, len(b), 64<<10)
			}
			assert.Eventually(t, func() bool { base.CloseIdleConnections(); return ac.active() == 0 }, 3*time.Second, 10*time.Millisecond, "connections left active: %d", ac.active())
		})
	}
}

// TestReview16LateHedgeFailureClosed: the first attempt answers 500 (not
// retried) while its hedges are out; they fail later, after the call
// returned: their bodies must be closed.
func TestReview16LateHedgeFailureClosed(t *testing.T) {
	srv, ac := hedgeServer(t, func(w http.ResponseWriter, r *http.Request, a retrysignal.Attempt) {
		if !a.Hedge {
			time.Sleep(30 * time.Millisecond)
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = io.WriteString(w, "primary")
			return
		}
		time.Sleep(80 * time.Millisecond)
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write(make([]byte, 128<<10))
	})
	base := &http.Transport{}
	defer base.CloseIdleConnections()
	c := hedgedClient(base, 3, 5*time.Millisecond, 2)
	for range 5 {
		resp, err := c.Get(srv.URL)
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, "primary", string(b))
	}
	time.Sleep(200 * time.Millisecond)
	assert.Eventually(t, func() bool { base.CloseIdleConnections(); return ac.active() == 0 }, 3*time.Second, 10*time.Millisecond, "connections left active: %d", ac.active())
}

// TestReview16CanceledWhileFailedHeld: the caller's context ends while a
// twin's failed answer is held and another twin is out: nothing leaks.
func TestReview16CanceledWhileFailedHeld(t *testing.T) {
	srv, ac := hedgeServer(t, func(w http.ResponseWriter, r *http.Request, a retrysignal.Attempt) {
		if a.Hedge {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write(make([]byte, 128<<10))
			return
		}
		select {
		case <-r.Context().Done():
		case <-time.After(2 * time.Second):
		}
	})
	base := &http.Transport{}
	defer base.CloseIdleConnections()
	c := hedgedClient(base, 3, 5*time.Millisecond, 1)
	for range 5 {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Millisecond)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		cancel()
	}
	assert.Eventually(t, func() bool { base.CloseIdleConnections(); return ac.active() == 0 }, 3*time.Second, 10*time.Millisecond, "connections left active: %d", ac.active())
}

// TestReview16HedgeStress: many goroutines, mixed answers, -race.
func TestReview16HedgeStress(t *testing.T) {
	var n atomic.Int64
	srv, ac := hedgeServer(t, func(w http.ResponseWriter, r *http.Request, a retrysignal.Attempt) {
		k := n.Add(1)
		time.Sleep(time.Duration(k%7) * 3 * time.Millisecond)
		switch k % 5 {
		case 0:
			_, _ = io.WriteString(w, "ok")
		case 1:
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write(make([]byte, 10<<10))
		case 2:
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = w.Write(make([]byte, 300<<10))
		default:
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write(make([]byte, 1<<10))
		}
	})
	base := &http.Transport{MaxIdleConnsPerHost: 100}
	defer base.CloseIdleConnections()
	c := hedgedClient(base, 3, 4*time.Millisecond, 2)
	var wg sync.WaitGroup
	var bad atomic.Int64
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 15 {
				resp, err := c.Get(srv.URL)
				if err != nil {
					bad.Add(1)
					t.Log(err)
					continue
				}
				if _, err := io.ReadAll(resp.Body); err != nil {
					bad.Add(1)
					t.Log("body:", err)
				}
				resp.Body.Close()
			}
		}()
	}
	wg.Wait()
	assert.Zero(t, bad.Load())
	assert.Eventually(t, func() bool { base.CloseIdleConnections(); return ac.active() == 0 }, 3*time.Second, 10*time.Millisecond, "connections left active: %d", ac.active())
}
