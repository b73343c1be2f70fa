package httpclient_test

// review169: end to end, the deadline a server behind deadline.Middleware
// gets is the caller's, within a small margin: never shorter than the
// caller's remaining time minus the transit, and never past it by more
// than the documented millisecond plus transit.

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/deadline"
	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

type review169Seen struct {
	mu   sync.Mutex
	dls  []time.Time
	hdrs []string
}

func (s *review169Seen) handler(fail *atomic.Int64) http.Handler {
	return deadline.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, ok := r.Context().Deadline()
		s.mu.Lock()
		if ok {
			s.dls = append(s.dls, d)
		} else {
			s.dls = append(s.dls, time.Time{})
		}
		s.mu.Unlock()
		if fail != nil && fail.Add(-1) >= 0 {
			time.Sleep(100 * time.Millisecond)
			http.Error(w, "busy", 503)
			return
		}
		w.Write([]byte("ok"))
	}))
}

func TestReview169_DeadlineEndToEnd(t *testing.T) {
	var fail atomic.Int64
	seen := &review169Seen{}
	srv := httptest.NewServer(seen.handler(&fail))
	defer srv.Close()
	slowDial := func() http.RoundTripper {
		tr := review169Base().(*http.Transport)
		d := &net.Dialer{}
		tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			time.Sleep(300 * time.Millisecond)
			return d.DialContext(ctx, network, addr)
		}
		tr.DisableKeepAlives = true
		return tr
	}
	for _, tc := range []struct {
		name     string
		p        *pipeline.Pipeline
		base     func() http.RoundTripper
		callerDL time.Duration // 0: none
		fails    int64
		// the deadline the server should get, relative to the call's start
		want func(start, callerDL time.Time) time.Time
	}{
		{"quickstart, caller 800ms", review169QuickStart(breaker.New("a")), review169Base, 800 * time.Millisecond, 0,
			func(s, c time.Time) time.Time { return c }},
		{"quickstart, no caller deadline (budget 2s)", review169QuickStart(breaker.New("b")), review169Base, 0, 0,
			func(s, c time.Time) time.Time { return s.Add(2 * time.Second) }},
		{"quickstart, slow dial 300ms", review169QuickStart(breaker.New("c")), slowDial, 800 * time.Millisecond, 0,
			func(s, c time.Time) time.Time { return c }},
		{"quickstart, 503 then retried, caller 1500ms", review169QuickStart(breaker.New("d")), review169Base, 1500 * time.Millisecond, 1,
			func(s, c time.Time) time.Time { return c }},
		{"attempt timeout 200ms", pipeline.New(pipeline.WithTimeBudget(2*time.Second), pipeline.WithAttemptTimeout(200*time.Millisecond),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3)))), review169Base, 0, 0,
			func(s, c time.Time) time.Time { return s.Add(200 * time.Millisecond) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seen.mu.Lock()
			seen.dls = nil
			seen.mu.Unlock()
			fail.Store(tc.fails)
			hc := &http.Client{Transport: httpclient.NewTransport(httpclient.WithPipeline(tc.p), httpclient.Base(tc.base()))}
			ctx := context.Background()
			var cdl time.Time
			if tc.callerDL > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.callerDL)
				defer cancel()
				cdl, _ = ctx.Deadline()
			}
			start := time.Now()
			req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			want := tc.want(start, cdl)
			seen.mu.Lock()
			defer seen.mu.Unlock()
			if len(seen.dls) != int(tc.fails)+1 {
				t.Fatalf("server saw %d requests", len(seen.dls))
			}
			for i, got := range seen.dls {
				if got.IsZero() {
					t.Fatalf("attempt %d: server got no deadline", i+1)
				}
				// transit on loopback: allow 15 ms on a loaded 2-core machine
				if got.Before(want.Add(-15*time.Millisecond)) || got.After(want.Add(100*time.Millisecond)) {
					t.Errorf("attempt %d: server's deadline %v from the caller's (%v from the start), want within -15ms and +100ms (transit, documented)", i+1, got.Sub(want), got.Sub(start))
				}
			}
		})
	}
}
