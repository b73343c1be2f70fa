package idempotencystore_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/redis/idempotencystore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
)

// Redis restarted from an RDB snapshot goes back in time, and what the
// snapshot held comes back: these tests show what docs/idempotency.md says
// of it (a limit, not a promise: AOF with appendfsync always, or the SQL
// store, keeps every write).

// TestASnapshotBringsBackAReleasedClaim: request A's claim is in the
// snapshot; A answers 503 and releases the key; the retry B claims it and
// runs. Redis restarts from the snapshot: the key holds A's claim again,
// held by no one. B's next renewal finds another token: B loses its lease
// and its handler is canceled (fencing cannot tell a claim that came back
// from one another request took).
func TestASnapshotBringsBackAReleasedClaim(t *testing.T) {
	srv := redistest.Start(t)
	var runs atomic.Int64
	store := idempotencystore.New(srv.Client(), "snapshot:")
	h := idempotency.Middleware(store, idempotency.SharedKeys(), idempotency.Lease(1500*time.Millisecond),
		idempotency.WithLogger(slog.New(slog.DiscardHandler)))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := runs.Add(1)
		if n == 1 {
			time.Sleep(200 * time.Millisecond)
			w.WriteHeader(http.StatusServiceUnavailable) // released: the client retries
			return
		}
		select {
		case <-time.After(2500 * time.Millisecond):
		case <-r.Context().Done():
			http.Error(w, "canceled: "+context.Cause(r.Context()).Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = fmt.Fprintf(w, `{"order":%d}`, n)
	}))
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)

	first := make(chan int, 1)
	go func() { code, _, _ := post(t, s.URL, "k"); first <- code }()
	time.Sleep(100 * time.Millisecond)
	require.NoError(t, srv.Client().Save(context.Background()).Err(), "the snapshot, A's claim in it")
	require.Equal(t, http.StatusServiceUnavailable, <-first)

	second := make(chan [2]string, 1)
	start := time.Now()
	go func() { code, _, body := post(t, s.URL, "k"); second <- [2]string{fmt.Sprint(code), body} }()
	time.Sleep(150 * time.Millisecond) // B runs
	srv.Kill()
	srv.Restart() // from the snapshot
	got := <-second
	t.Logf("B answered %s %q after %v; runs %d", got[0], got[1], time.Since(start), runs.Load())
	assert.NotEqual(t, "201", got[0], "B kept its lease against a claim that came back from the snapshot")
}

// TestASnapshotBringsBackACompletedKeyAsAClaim: the claim of request A is
// in the snapshot; A completes (201, stored). Redis restarts from the
// snapshot: the key holds A's claim again, which no one will complete or
// release. Retries get 409 for the rest of the lease, then run the request
// a second time.
func TestASnapshotBringsBackACompletedKeyAsAClaim(t *testing.T) {
	srv := redistest.Start(t)
	var runs atomic.Int64
	rep := replica(t, srv, &runs, 300*time.Millisecond, idempotency.Lease(1500*time.Millisecond))
	first := make(chan int, 1)
	go func() { code, _, _ := post(t, rep.URL, "k"); first <- code }()
	time.Sleep(100 * time.Millisecond)
	require.NoError(t, srv.Client().Save(context.Background()).Err(), "the snapshot, A's claim in it")
	require.Equal(t, http.StatusCreated, <-first)
	srv.Kill()
	srv.Restart() // from the snapshot
	var conflicts int
	var code int
	var replay, body string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		code, replay, body = post(t, rep.URL, "k")
		if code != http.StatusConflict && code != http.StatusServiceUnavailable {
			break
		}
		conflicts++
	}
	t.Logf("retry: %d replay=%q %s after %d answers of 409/503; runs %d", code, replay, body, conflicts, runs.Load())
	assert.Positive(t, conflicts, "retries found the claim that came back")
	assert.EqualValues(t, 2, runs.Load(), "the request ran again once the claim's lease ran out")
}
