package idempotencystore_test

import (
	"context"
	"database/sql"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/sql/idempotencystore"
)

// TestReview159_ClaimWhoseAnswerWasLostIsFreed: replica A's claim INSERT
// commits and its answer is lost (the connection reset): A answers 503,
// and the claim holds the key in the database. The promise (Guard.reap):
// the guard frees a claim its Begin gave up on, tried a store timeout
// after, so the client's retry, sent to replica B, runs within a few
// store timeouts rather than getting 409 for the whole lease; and the
// request runs once.
func TestReview159_ClaimWhoseAnswerWasLostIsFreed(t *testing.T) {
	s := startPostgres(t)
	direct := r159Open(t, s)
	p := r159NewProxy(t, "127.0.0.1:"+s.port)
	viaProxy, err := sql.Open("pgx", "postgres://postgres@"+p.addr()+"/postgres?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	defer viaProxy.Close()
	stA := idempotencystore.New(viaProxy, "r159_orphan")
	stB := idempotencystore.New(direct, "r159_orphan")
	if err := stB.CreateTable(context.Background()); err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "ok")
	})
	const storeTimeout = 200 * time.Millisecond
	opts := []idempotency.Option{idempotency.SharedKeys(), idempotency.Lease(6 * time.Second), idempotency.StoreTimeout(storeTimeout)}
	a := httptest.NewServer(idempotency.Middleware(stA, opts...)(h))
	defer a.Close()
	b := httptest.NewServer(idempotency.Middleware(stB, opts...)(h))
	defer b.Close()
	post := func(url string) int {
		req, _ := http.NewRequest("POST", url, strings.NewReader("x"))
		req.Header.Set("Idempotency-Key", "orphan-1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		io.Copy(io.Discard, resp.Body)
		return resp.StatusCode
	}
	if err := viaProxy.Ping(); err != nil {
		t.Fatal(err)
	}
	p.match.Store([]byte("INSERT 0 1"))
	p.armed.Store(true)
	if code := post(a.URL); code != http.StatusServiceUnavailable {
		t.Fatalf("premise: A answered %d with its claim's answer lost (cut %d)", code, p.cut.Load())
	}
	if p.cut.Load() != 1 {
		t.Fatal("premise: no answer cut")
	}
	var n int
	if err := direct.QueryRow(`SELECT count(*) FROM r159_orphan WHERE NOT done AND expires_at > statement_timestamp()`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("premise: the lost claim is not in the table (%d, %v)", n, err)
	}
	lost := time.Now()
	var code int
	for {
		code = post(b.URL)
		if code != http.StatusConflict || time.Since(lost) > 3*time.Second {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code != http.StatusCreated {
		t.Fatalf("retry on B: %d, %v after the claim's answer was lost", code, time.Since(lost))
	}
	if d := time.Since(lost); d > 6*storeTimeout {
		t.Errorf("the lost claim held the key for %v (store timeout %v)", d, storeTimeout)
	}
	if runs.Load() != 1 {
		t.Errorf("handler ran %d times", runs.Load())
	}
	t.Logf("retry ran on B %v after the claim's answer was lost", time.Since(lost).Round(time.Millisecond))
}
