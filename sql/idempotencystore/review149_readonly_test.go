package idempotencystore_test

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/sql/idempotencystore"
)

func review149PG(t *testing.T, store *idempotencystore.Store, runs *sync.Map) *httptest.Server {
	srv := httptest.NewServer(idempotency.Middleware(store, idempotency.SharedKeys(), idempotency.WithLogger(slog.New(slog.DiscardHandler)),
		idempotency.FailOpenAfter(time.Second), idempotency.Lease(3*time.Second))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v, _ := runs.LoadOrStore(r.Header.Get(idempotency.Header), new(atomic.Int32))
		v.(*atomic.Int32).Add(1)
		w.WriteHeader(http.StatusCreated)
	})))
	t.Cleanup(srv.Close)
	return srv
}

// A database that refuses writes but serves reads (a standby left behind
// by a failover, default_transaction_read_only, a tablespace full): the
// SQL store's Begin reads the live record first, so a repeat of a stored
// key is replayed, until new keys have failed for FailOpenAfter; then the
// guard fails open and no longer asks: the stored key runs again.
func TestReview149ReadOnlyDatabaseRunsAStoredKeyAgain(t *testing.T) {
	pg := startPostgres(t)
	db, store := pg.open()
	var runs sync.Map
	a, b := review149PG(t, store, &runs), review149PG(t, store, &runs)
	if code, _, _ := postKey(t, a.URL, "paid-1"); code != http.StatusCreated {
		t.Fatalf("first: %d", code)
	}
	if _, err := db.ExecContext(t.Context(), `ALTER SYSTEM SET default_transaction_read_only = on`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(t.Context(), `SELECT pg_reload_conf()`); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	code, replayed, _ := postKey(t, b.URL, "paid-1")
	t.Logf("repeat at once on B, the database read-only: %d replayed=%q", code, replayed)
	deadline := time.Now().Add(2200 * time.Millisecond)
	for n := 0; time.Now().Before(deadline); n++ {
		postKey(t, b.URL, fmt.Sprintf("new-%d", n))
		time.Sleep(100 * time.Millisecond)
	}
	code, replayed, _ = postKey(t, b.URL, "paid-1")
	v, _ := runs.Load("paid-1")
	n := v.(*atomic.Int32).Load()
	t.Logf("repeat on B after FailOpenAfter: %d replayed=%q; paid-1 runs %d", code, replayed, n)
	if n != 1 {
		t.Errorf("paid-1, readable in the database, ran %d times", n)
	}
}
