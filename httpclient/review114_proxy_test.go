package httpclient_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// hangFirst answers 200 but to its first n requests, which it holds until
// the client gives up.
func r114HangFirst(t *testing.T, n int32) (*httptest.Server, *atomic.Int32) {
	var got atomic.Int32
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if got.Add(1) <= n {
			select {
			case <-r.Context().Done():
			case <-time.After(3 * time.Second):
			}
			return
		}
		w.Write([]byte("ok"))
	}))
	t.Cleanup(s.Close)
	return s, &got
}

// A Proxy function that honours the request's context (as a PAC lookup
// does): after an attempt timeout, net/http returns the context's cause,
// and proxyError, calling Proxy again with the attempt's (now ended)
// context, gets the same error back: the attempt timeout against a hung
// dependency is taken for the caller's own error, not retried.
func TestReview114_ProxyCtxAttemptTimeoutNotRetried(t *testing.T) {
	for _, tc := range []struct {
		name  string
		proxy func(*http.Request) (*url.URL, error)
	}{
		{"nil proxy", nil},
		{"ctx-aware proxy (Cause)", func(r *http.Request) (*url.URL, error) {
			if context.Cause(r.Context()) != nil {
				return nil, context.Cause(r.Context())
			}
			return nil, nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, got := r114HangFirst(t, 1)
			base := &http.Transport{Proxy: tc.proxy}
			defer base.CloseIdleConnections()
			p := pipeline.New(pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(time.Millisecond), retrypolicy.MaxDelay(time.Millisecond))),
				pipeline.WithAttemptTimeout(150*time.Millisecond))
			hc := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(p), httpclient.Base(base))}
			resp, err := hc.Get(s.URL)
			if err != nil {
				t.Fatalf("call failed after %d requests: %v (class %v); the dependency answers its 2nd request", got.Load(), err, resilience.Classify(err))
			}
			resp.Body.Close()
		})
	}
}

// The same with the pipeline's time budget and a Proxy returning
// ctx.Err(): a dependency that hangs every call never opens the breaker,
// as each hang is taken for the caller's own error.
func TestReview114_ProxyCtxBudgetHangNotCounted(t *testing.T) {
	for _, tc := range []struct {
		name  string
		proxy func(*http.Request) (*url.URL, error)
	}{
		{"nil proxy", nil},
		{"ctx-aware proxy (Err)", func(r *http.Request) (*url.URL, error) {
			if err := r.Context().Err(); err != nil {
				return nil, err
			}
			return nil, nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := r114HangFirst(t, 1000)
			base := &http.Transport{Proxy: tc.proxy}
			defer base.CloseIdleConnections()
			b := breaker.New("hung", breaker.ConsecutiveFailures(3))
			p := pipeline.New(pipeline.WithBreaker(b), pipeline.WithTimeBudget(80*time.Millisecond))
			hc := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(p), httpclient.Base(base))}
			var last error
			for range 5 {
				resp, err := hc.Get(s.URL)
				if err == nil {
					resp.Body.Close()
				}
				last = err
				if errors.Is(err, breaker.ErrOpen) {
					return
				}
			}
			t.Fatalf("breaker never opened on a dependency that hangs every call; last error %v (class %v), state %v", last, resilience.Classify(last), b.State())
		})
	}
}

// A Proxy function that fails for a while (a PAC lookup down): its error
// is the caller's, neither retried nor counted by the breaker, which must
// not open on a healthy dependency that never saw a request. (Plain
// net/http returns the Proxy's error once.) The Transport asks the Proxy
// again after an error, so one that fails only now and then, every other
// call say, is recognised only when it fails again (its failures count,
// as they did before: the Transport's doc).
func TestReview114_ProxyFlakyCountedAgainstDependency(t *testing.T) {
	var hits atomic.Int32
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer s.Close()
	var calls atomic.Int32
	errPAC := errors.New("pac: lookup failed")
	base := &http.Transport{Proxy: func(r *http.Request) (*url.URL, error) {
		if calls.Add(1) <= 20 {
			return nil, errPAC
		}
		return nil, nil
	}}
	defer base.CloseIdleConnections()
	b := breaker.New("dep", breaker.ConsecutiveFailures(3), breaker.OpenTimeout(time.Hour))
	p := pipeline.New(pipeline.WithBreaker(b), pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(time.Millisecond), retrypolicy.MaxDelay(time.Millisecond))))
	hc := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(p), httpclient.Base(base))}
	var err error
	for range 3 {
		var resp *http.Response
		resp, err = hc.Get(s.URL)
		if err == nil {
			resp.Body.Close()
		}
	}
	if c := resilience.Classify(err); err != nil && c != resilience.ClassRejected {
		t.Errorf("a Proxy error classed %v (not the caller's): %v; Proxy called %d times, server hit %d", c, err, calls.Load(), hits.Load())
	}
	if b.State() != resilience.StateClosed {
		t.Errorf("breaker %v after Proxy errors alone (server hit %d times)", b.State(), hits.Load())
	}
}
