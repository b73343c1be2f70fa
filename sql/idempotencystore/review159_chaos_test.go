package idempotencystore_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/sql/idempotencystore"
)

// TestReview159_TwoReplicasRaceThroughAKill: keys sent at once to two
// replicas, each retried until it gets 201, while PostgreSQL is killed
// (-9) and restarted under them. The handlers do as CompleteTx says (the
// effect and the record in one transaction bounded by the lease; Abandon
// when it does not commit). The promise: every key's effect commits
// exactly once.
func TestReview159_TwoReplicasRaceThroughAKill(t *testing.T) {
	r159Race(t, func(s *pgServer) {
		s.Kill()
		time.Sleep(700 * time.Millisecond)
		s.Restart()
	})
}

// TestReview159_TwoReplicasRaceThroughAFreeze: the same, PostgreSQL
// frozen (SIGSTOP) for longer than the lease: commits sent before the
// freeze are taken up after it, past the leases.
func TestReview159_TwoReplicasRaceThroughAFreeze(t *testing.T) {
	r159Race(t, func(s *pgServer) {
		s.Freeze()
		time.Sleep(2500 * time.Millisecond)
		s.Thaw()
	})
}

func r159Race(t *testing.T, fault func(*pgServer)) {
	s := startPostgres(t)
	storeDB := r159Open(t, s)
	st := idempotencystore.New(storeDB, "r159_chaos")
	ctx := context.Background()
	if err := st.CreateTable(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := storeDB.Exec(`CREATE TABLE r159_effects3 (id serial PRIMARY KEY, k text)`); err != nil {
		t.Fatal(err)
	}
	hdb := r159Open(t, s)
	handler := func(w http.ResponseWriter, r *http.Request) {
		c := idempotency.FromContext(r.Context())
		ctx, cancel := c.WithLeaseDeadline(r.Context())
		defer cancel()
		key := r.Header.Get("Idempotency-Key")
		tx, err := hdb.BeginTx(ctx, nil)
		if err != nil {
			http.Error(w, err.Error(), 503)
			return
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO r159_effects3 (k) VALUES ($1)`, key); err != nil {
			tx.Rollback()
			http.Error(w, err.Error(), 503)
			return
		}
		time.Sleep(20 * time.Millisecond) // some work
		if err := st.CompleteTx(ctx, tx, c, http.StatusCreated, nil, []byte("created "+key)); err != nil {
			tx.Rollback()
			c.Abandon()
			code := 503
			if errors.Is(err, idempotency.ErrNotOwner) {
				code = 409
			}
			http.Error(w, err.Error(), code)
			return
		}
		if err := tx.Commit(); err != nil {
			c.Abandon()
			http.Error(w, err.Error(), 503)
			return
		}
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "created "+key)
	}
	opts := []idempotency.Option{idempotency.SharedKeys(), idempotency.Lease(2 * time.Second),
		idempotency.StoreTimeout(200 * time.Millisecond), idempotency.FailOpenAfter(-1)}
	a := httptest.NewServer(idempotency.Middleware(st, opts...)(http.HandlerFunc(handler)))
	defer a.Close()
	b := httptest.NewServer(idempotency.Middleware(st, opts...)(http.HandlerFunc(handler)))
	defer b.Close()
	client := &http.Client{Timeout: 5 * time.Second}

	const keys = 16
	deadline := time.Now().Add(15 * time.Second)
	var mu sync.Mutex
	final := map[string][]string{}
	var wg sync.WaitGroup
	for k := range keys {
		key := fmt.Sprintf("chaos-%d", k)
		for _, url := range []string{a.URL, b.URL} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(time.Duration(k%8) * 60 * time.Millisecond)
				for time.Now().Before(deadline) {
					req, _ := http.NewRequest("POST", url, strings.NewReader("x"))
					req.Header.Set("Idempotency-Key", key)
					resp, err := client.Do(req)
					if err != nil {
						time.Sleep(50 * time.Millisecond)
						continue
					}
					body, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.StatusCode == 201 {
						mu.Lock()
						final[key] = append(final[key], string(body))
						mu.Unlock()
						return
					}
					time.Sleep(50 * time.Millisecond)
				}
			}()
		}
	}
	time.Sleep(250 * time.Millisecond)
	fault(s)
	wg.Wait()

	for k := range keys {
		key := fmt.Sprintf("chaos-%d", k)
		var n int
		if err := storeDB.QueryRow(`SELECT count(*) FROM r159_effects3 WHERE k = $1`, key).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			t.Errorf("%s: effect committed %d times (201 answers: %d)", key, n, len(final[key]))
		}
		if len(final[key]) != 2 {
			t.Errorf("%s: %d of 2 clients got 201 within the deadline", key, len(final[key]))
		}
	}
}
