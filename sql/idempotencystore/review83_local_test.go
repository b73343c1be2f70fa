package idempotencystore_test

import (
	"bytes"
	"database/sql"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/sql/idempotencystore"
)

// A claim made on the guard's own records (the store down, the guard
// failed open): CompleteTx writes nothing, the middleware keeps the
// result, as the middleware stores one: over MaxResponse not replayable.
func TestReview83LocalClaimSizes(t *testing.T) {
	d, _ := db(t)
	dead, _ := sql.Open("pgx", "postgres://postgres@127.0.0.1:1/postgres?sslmode=disable&connect_timeout=1")
	defer dead.Close()
	s := idempotencystore.New(dead, "review83_local")
	const max = 100
	var runs atomic.Int64
	var locals atomic.Int64
	var body []byte
	mw := idempotency.Middleware(s, idempotency.SharedKeys(), idempotency.MaxResponse(max), idempotency.FailOpenAfter(0),
		idempotency.StoreTimeout(100*time.Millisecond), idempotency.Lease(time.Second))
	srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		c := idempotency.FromContext(r.Context())
		if c.Local() {
			locals.Add(1)
		}
		tx, err := d.BeginTx(r.Context(), nil)
		if err != nil {
			c.Abandon()
			w.WriteHeader(503)
			return
		}
		if err := s.CompleteTx(r.Context(), tx, c, 201, http.Header{"X-R": {"1"}}, body); err != nil {
			_ = tx.Rollback()
			c.Abandon()
			http.Error(w, err.Error(), 503)
			return
		}
		_ = tx.Commit()
		w.Header().Set("X-R", "1")
		w.WriteHeader(201)
		_, _ = w.Write(body)
	})))
	defer srv.Close()
	// Fail the guard open first.
	for i := 0; i < 50; i++ {
		st, _, _ := review83Do(t, srv.URL, fmt.Sprint("warm-", i))
		if st == 201 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, n := range []int{0, max - 1, max, max + 1} {
		body = review83Body(n, 3)
		runs.Store(0)
		locals.Store(0)
		key := fmt.Sprint("local-", n)
		st, _, b := review83Do(t, srv.URL, key)
		if st != 201 || !bytes.Equal(b, body) {
			t.Fatalf("n=%d first %d", n, st)
		}
		st, h, b := review83Do(t, srv.URL, key)
		if n > max {
			if st != 500 {
				t.Errorf("n=%d repeat of local over max: %d", n, st)
			}
		} else if st != 201 || !bytes.Equal(b, body) || h.Get("X-R") != "1" {
			t.Errorf("n=%d repeat: %d %d", n, st, len(b))
		}
		if runs.Load() != 1 || locals.Load() != 1 {
			t.Errorf("n=%d runs %d locals %d", n, runs.Load(), locals.Load())
		}
	}
}
