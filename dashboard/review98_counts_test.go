package dashboard_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync"
	"testing"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/dashboard"
	"github.com/resiliencekit/resiliencekit/registry"
)

type r98State struct {
	Breakers []struct {
		Name        string  `json:"name"`
		Requests    uint32  `json:"requests"`
		Successes   uint32  `json:"successes"`
		Failures    uint32  `json:"failures"`
		FailureRate float64 `json:"failure_rate"`
	} `json:"breakers"`
}

func r98Get(t *testing.T, h http.Handler) r98State {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/state", nil))
	var s r98State
	if err := json.Unmarshal(rec.Body.Bytes(), &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// A breaker forced closed: calls still in flight are shown as successes
// (requests - failures - exclusions), before any of them has ended.
func TestReview98ForcedClosedInFlightShownAsSuccesses(t *testing.T) {
	reg := registry.New()
	b := breaker.New("db")
	if err := reg.AddBreaker(b); err != nil {
		t.Fatal(err)
	}
	defer runtime.KeepAlive(b)
	if err := b.SetMode(context.Background(), breaker.ForcedClosed, "alice"); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	var wg sync.WaitGroup
	started := make(chan struct{}, 10)
	for range 10 {
		wg.Go(func() {
			_ = b.Execute(context.Background(), func(context.Context) error {
				started <- struct{}{}
				<-release
				return nil
			})
		})
	}
	for range 10 {
		<-started
	}
	s := r98Get(t, dashboard.New(reg))
	close(release)
	wg.Wait()
	if len(s.Breakers) != 1 {
		t.Fatalf("breakers: %+v", s.Breakers)
	}
	if got := s.Breakers[0].Successes; got != 0 {
		t.Errorf("10 calls in flight, none ended: the dashboard shows %d successes", got)
	}
}

// The same, with failures: a breaker forced closed whose in-flight calls
// will all fail shows a failure rate far below the real one.
func TestReview98ForcedClosedFailureRateDiluted(t *testing.T) {
	reg := registry.New()
	b := breaker.New("db2")
	if err := reg.AddBreaker(b); err != nil {
		t.Fatal(err)
	}
	defer runtime.KeepAlive(b)
	_ = b.SetMode(context.Background(), breaker.ForcedClosed, "alice")
	// 10 calls ended, all failed
	for range 10 {
		_ = b.Execute(context.Background(), func(context.Context) error { return context.DeadlineExceeded })
	}
	release := make(chan struct{})
	started := make(chan struct{}, 90)
	var wg sync.WaitGroup
	for range 90 {
		wg.Go(func() {
			_ = b.Execute(context.Background(), func(context.Context) error {
				started <- struct{}{}
				<-release
				return errBoom
			})
		})
	}
	for range 90 {
		<-started
	}
	s := r98Get(t, dashboard.New(reg))
	close(release)
	wg.Wait()
	bs := s.Breakers[0]
	t.Logf("shown: %+v", bs)
	if bs.Failures > 0 && bs.FailureRate < 0.99 {
		t.Errorf("every call that ended failed (%d failures), the dashboard shows a failure rate of %.2f", bs.Failures, bs.FailureRate)
	}
}

type boomErr struct{}

func (boomErr) Error() string { return "boom" }

var errBoom error = boomErr{}
