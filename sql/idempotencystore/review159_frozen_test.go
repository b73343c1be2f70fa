package idempotencystore_test

import (
	"context"
	"database/sql"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/sql/idempotencystore"
)

// TestReview159_CommitFrozenPastTheLease: PostgreSQL is frozen (SIGSTOP)
// as the handler's COMMIT is on its way, for longer than the lease; the
// handler's context (WithLeaseDeadline) gives up on it, the handler calls
// Abandon and answers an error. The frozen server still has the COMMIT in
// its socket, and commits it once thawed, after the lease ran out. The
// promise: the effect and the record commit together or not at all, so a
// retry, to either replica, afterwards either replays the commit or runs
// it once: the effect is never twice, never lost with a 201.
func TestReview159_CommitFrozenPastTheLease(t *testing.T) {
	s := startPostgres(t)
	storeDB := r159Open(t, s)
	st := idempotencystore.New(storeDB, "r159_frozen")
	ctx := context.Background()
	if err := st.CreateTable(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := storeDB.Exec(`CREATE TABLE r159_effects2 (id serial PRIMARY KEY, k text)`); err != nil {
		t.Fatal(err)
	}
	hdb := r159Open(t, s)

	inTx := make(chan struct{}, 1)
	proceed := make(chan struct{})
	var first atomic.Bool
	first.Store(true)
	var commitErr atomic.Value
	handler := func(w http.ResponseWriter, r *http.Request) {
		c := idempotency.FromContext(r.Context())
		ctx, cancel := c.WithLeaseDeadline(r.Context())
		defer cancel()
		tx, err := hdb.BeginTx(ctx, nil)
		if err != nil {
			http.Error(w, err.Error(), 503)
			return
		}
		key := r.Header.Get("Idempotency-Key")
		if _, err := tx.ExecContext(ctx, `INSERT INTO r159_effects2 (k) VALUES ($1)`, key); err != nil {
			tx.Rollback()
			http.Error(w, err.Error(), 503)
			return
		}
		if err := st.CompleteTx(ctx, tx, c, http.StatusCreated, http.Header{"X-Order": {"o-1"}}, []byte("created")); err != nil {
			tx.Rollback()
			c.Abandon()
			http.Error(w, err.Error(), 500)
			return
		}
		if first.CompareAndSwap(true, false) {
			inTx <- struct{}{}
			<-proceed
		}
		if err := tx.Commit(); err != nil {
			commitErr.Store(err)
			c.Abandon()
			http.Error(w, "commit: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("X-Order", "o-1")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "created")
	}
	const lease = 1200 * time.Millisecond
	opts := []idempotency.Option{idempotency.SharedKeys(), idempotency.Lease(lease), idempotency.StoreTimeout(200 * time.Millisecond), idempotency.FailOpenAfter(-1)}
	a := httptest.NewServer(idempotency.Middleware(st, opts...)(http.HandlerFunc(handler)))
	defer a.Close()
	b := httptest.NewServer(idempotency.Middleware(st, opts...)(http.HandlerFunc(handler)))
	defer b.Close()
	client := &http.Client{Timeout: 5 * time.Second}
	post := func(url string) (int, string, http.Header, error) {
		req, _ := http.NewRequest("POST", url, strings.NewReader("x"))
		req.Header.Set("Idempotency-Key", "frozen-1")
		resp, err := client.Do(req)
		if err != nil {
			return 0, "", nil, err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body), resp.Header, nil
	}

	type answer struct {
		code int
		body string
	}
	firstDone := make(chan answer, 1)
	go func() {
		code, body, _, _ := post(a.URL)
		firstDone <- answer{code, body}
	}()
	select {
	case <-inTx:
	case <-time.After(5 * time.Second):
		t.Fatal("handler did not reach its commit")
	}
	s.Freeze()
	close(proceed)
	var fa answer
	select {
	case fa = <-firstDone:
	case <-time.After(lease + 3*time.Second):
		s.Thaw()
		t.Fatal("the first request was not bounded by its lease while the database was frozen")
	}
	time.Sleep(200 * time.Millisecond)
	s.Thaw()
	t.Logf("first request: %d %q (commit error %v)", fa.code, fa.body, commitErr.Load())

	// Retry until an answer that is final (not 409/503), on both replicas.
	var code int
	var body string
	var h http.Header
	deadline := time.Now().Add(lease + 4*time.Second)
	for _, url := range []string{b.URL, a.URL} {
		for {
			var err error
			code, body, h, err = post(url)
			if err == nil && code != http.StatusConflict && code != http.StatusServiceUnavailable {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("retry still refused: %d %v", code, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Logf("retry to %s: %d replayed=%q", url, code, h.Get("Idempotent-Replayed"))
		if code != http.StatusCreated || body != "created" || h.Get("X-Order") != "o-1" {
			t.Errorf("retry to %s: %d %q %v", url, code, body, h)
		}
	}
	var n int
	if err := storeDB.QueryRow(`SELECT count(*) FROM r159_effects2 WHERE k = 'frozen-1'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("effect committed %d times (first request answered %d, retries 201)", n, fa.code)
	}
}

// TestReview159_ExtremeDurations: a lease and a TTL of the largest
// duration (the guard's options take any positive one) are written and
// read back: the claim holds the key, and the record completed with it is
// replayed, not refused by an interval out of range.
func TestReview159_ExtremeDurations(t *testing.T) {
	s := startPostgres(t)
	db := r159Open(t, s)
	st := idempotencystore.New(db, "r159_extreme")
	ctx := context.Background()
	if err := st.CreateTable(ctx); err != nil {
		t.Fatal(err)
	}
	g := idempotency.NewGuard(st, idempotency.TTL(math.MaxInt64), idempotency.Lease(math.MaxInt64), idempotency.StoreTimeout(time.Second))
	c, _, err := g.Begin(ctx, "s", "k", "fp")
	if err != nil || c == nil {
		t.Fatalf("Begin with a lease of %v: %v", time.Duration(math.MaxInt64), err)
	}
	if _, stored, err := g.Begin(ctx, "s", "k", "fp"); err != idempotency.ErrInProgress || stored != nil {
		t.Errorf("repeat during the claim: %v %v", stored, err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CompleteTx(ctx, tx, c, 201, nil, []byte("b")); err != nil {
		tx.Rollback()
		t.Fatalf("CompleteTx with a TTL of %v: %v", time.Duration(math.MaxInt64), err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	c.Complete(ctx, idempotency.Record{Status: 201, Body: []byte("b")})
	g2 := idempotency.NewGuard(st)
	_, stored, err := g2.Begin(ctx, "s", "k", "fp")
	if err != nil || stored == nil || stored.Status != 201 || string(stored.Body) != "b" {
		t.Errorf("replay after a TTL of %v: %v %v", time.Duration(math.MaxInt64), stored, err)
	}
	var _ *sql.DB
}
