package idempotencystore_test

import (
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/redis/idempotencystore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// A Redis that claims (SET NX, GET) but refuses scripts (EVAL renamed
// away, an ACL without @scripting, a proxy that does not pass EVAL) took
// every claim and completed none: every request ran, its result was never
// stored, and its retry after the lease ran again. The store now checks
// for it with the eviction policy: Begin fails with ErrScriptsRefused
// (503, reported), and the guard, once it has failed open, runs keys on
// its own records, each once.
func TestReview149RedisWithoutScriptsRunsEveryRetryAgain(t *testing.T) {
	srv := redistest.Start(t, "--appendonly", "no", "--rename-command", "EVAL", "", "--rename-command", "EVALSHA", "")
	var runs sync.Map
	var scripts atomic.Int32
	l := resilience.ListenerFunc(func(e resilience.Event) {
		if e.Kind == resilience.EventStoreFailed && errors.Is(e.Err, idempotencystore.ErrScriptsRefused) {
			scripts.Add(1)
		}
	})
	a := review149Start(t, srv, &runs, 0, idempotency.Lease(1500*time.Millisecond), idempotency.StoreTimeout(100*time.Millisecond),
		idempotency.FailOpenAfter(time.Second), idempotency.WithListener(l))
	code, _, _ := review149Post(t, a.url, "pay-1")
	if code != http.StatusServiceUnavailable || scripts.Load() == 0 {
		t.Fatalf("first: %d, %d failures reported as ErrScriptsRefused; want 503 and the reason", code, scripts.Load())
	}
	time.Sleep(2500 * time.Millisecond) // past FailOpenAfter, and a lease
	for range 3 {
		code, _, replayed := review149Post(t, a.url, "pay-1")
		t.Logf("retry: %d replayed=%v; runs %d", code, replayed, review149Runs(&runs, "pay-1"))
	}
	if got := review149Runs(&runs, "pay-1"); got != 1 {
		t.Errorf("pay-1 ran %d times on a Redis that refuses scripts, want once (failed open)", got)
	}
}
