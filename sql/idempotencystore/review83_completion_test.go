package idempotencystore_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/sql/idempotencystore"
)

func review83DB(t *testing.T, table string) (*sql.DB, *idempotencystore.Store) {
	t.Helper()
	dsn := os.Getenv("RESILIENCEKIT_POSTGRES_DSN")
	if dsn == "" {
		t.Skip("RESILIENCEKIT_POSTGRES_DSN is not set")
	}
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(40) // the handlers' pool
	t.Cleanup(func() { db.Close() })
	sdb, err := sql.Open("pgx", dsn) // the store's own pool, as the package doc advises
	if err != nil {
		t.Fatal(err)
	}
	sdb.SetMaxOpenConns(100)
	t.Cleanup(func() { sdb.Close() })
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `DROP TABLE IF EXISTS `+table); err != nil {
		t.Fatal(err)
	}
	s := idempotencystore.New(sdb, table)
	if err := s.CreateTable(ctx); err != nil {
		t.Fatal(err)
	}
	return db, s
}

// review83Server runs a handler that records its response with CompleteTx
// and writes it, counting runs.
func review83Server(t *testing.T, db *sql.DB, s *idempotencystore.Store, max int, body func(r *http.Request) []byte, runs *atomic.Int64) *httptest.Server {
	mw := idempotency.Middleware(s, idempotency.SharedKeys(), idempotency.MaxResponse(max), idempotency.Lease(6*time.Second), idempotency.StoreTimeout(2*time.Second))
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		c := idempotency.FromContext(r.Context())
		if c == nil {
			http.Error(w, "no claim", 500)
			return
		}
		b := body(r)
		hdr := http.Header{"Content-Type": {"application/x-review"}, "X-Review": {"a", "b"}, "X-Empty": {""}}
		ctx, cancel := c.WithLeaseDeadline(r.Context())
		defer cancel()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			c.Abandon()
			http.Error(w, err.Error(), 503)
			return
		}
		if err := s.CompleteTx(ctx, tx, c, http.StatusCreated, hdr, b); err != nil {
			_ = tx.Rollback()
			c.Abandon()
			http.Error(w, err.Error(), 503)
			return
		}
		if err := tx.Commit(); err != nil {
			c.Abandon()
			http.Error(w, err.Error(), 503)
			return
		}
		for k, vs := range hdr {
			w.Header()[k] = vs
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(b)
	})
	srv := httptest.NewServer(mw(h))
	t.Cleanup(srv.Close)
	return srv
}

func review83Do(t *testing.T, url, key string) (int, http.Header, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader("payload"))
	req.Header.Set(idempotency.Header, key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

func review83Body(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

func TestReview83CompleteTxSizes(t *testing.T) {
	db, s := review83DB(t, "review83_sizes")
	const max = 100
	for _, n := range []int{0, 1, max - 1, max, max + 1, 10 * max} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			var runs atomic.Int64
			want := review83Body(n, byte(n))
			srv := review83Server(t, db, s, max, func(*http.Request) []byte { return want }, &runs)
			key := fmt.Sprintf("k-%d-%d", n, time.Now().UnixNano())
			st, _, b := review83Do(t, srv.URL, key)
			if st != 201 || !bytes.Equal(b, want) {
				t.Fatalf("first: %d %d bytes", st, len(b))
			}
			var raw []byte
			if err := db.QueryRow(`SELECT record FROM review83_sizes WHERE key LIKE '%' || $1`, key).Scan(&raw); err != nil {
				t.Fatal(err)
			}
			var rec idempotency.Record
			if err := json.Unmarshal(raw, &rec); err != nil {
				t.Fatal(err)
			}
			if n > max {
				if !rec.Truncated || len(rec.Body) != 0 || !rec.Done {
					t.Fatalf("stored over max: truncated=%v body=%d done=%v", rec.Truncated, len(rec.Body), rec.Done)
				}
			} else if rec.Truncated || !bytes.Equal(rec.Body, want) {
				t.Fatalf("stored: truncated=%v body=%d", rec.Truncated, len(rec.Body))
			}
			if rec.Fingerprint == "" || rec.Token == "" {
				t.Fatalf("stored without fingerprint/token: %+v", rec)
			}
			for i := 0; i < 3; i++ {
				st, h, b := review83Do(t, srv.URL, key)
				if n > max {
					if st != 500 {
						t.Fatalf("repeat of truncated: %d %q", st, b)
					}
				} else {
					if st != 201 || !bytes.Equal(b, want) || h.Get(idempotency.ReplayedHeader) != "true" {
						t.Fatalf("replay: %d %d bytes replayed=%q", st, len(b), h.Get(idempotency.ReplayedHeader))
					}
					if got := h.Values("X-Review"); len(got) != 2 || got[0] != "a" || got[1] != "b" || h.Get("Content-Type") != "application/x-review" {
						t.Fatalf("replayed header: %v", h)
					}
					if _, ok := h["X-Empty"]; !ok {
						t.Fatalf("empty header lost: %v", h)
					}
				}
			}
			if runs.Load() != 1 {
				t.Fatalf("handler ran %d times", runs.Load())
			}
		})
	}
}

// Many keys at once, sizes around the limit, many repeats in parallel.
func TestReview83CompleteTxConcurrent(t *testing.T) {
	db, s := review83DB(t, "review83_conc")
	const max = 64
	var runs atomic.Int64
	srv := review83Server(t, db, s, max, func(r *http.Request) []byte {
		k := r.Header.Get(idempotency.Header)
		var n int
		fmt.Sscanf(k[strings.LastIndex(k, "-")+1:], "%d", &n)
		return review83Body(n, byte(len(k)))
	}, &runs)
	prefix := fmt.Sprint(time.Now().UnixNano())
	const keys = 40
	var wg sync.WaitGroup
	var bad atomic.Int64
	var mu sync.Mutex
	var errs []string
	for i := 0; i < keys; i++ {
		n := max - 2 + i%5 // 62..66
		key := fmt.Sprintf("%s-%d-%d", prefix, i, n)
		want := review83Body(n, byte(len(key)))
		for j := 0; j < 3; j++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				deadline := time.Now().Add(10 * time.Second)
				for {
					st, _, b := review83Do(t, srv.URL, key)
					// 409 while the key's first request runs; 503 when a claim
					// took longer than StoreTimeout (CI under -race saw it):
					// a client retries both.
					if (st == http.StatusConflict || st == http.StatusServiceUnavailable) && time.Now().Before(deadline) {
						time.Sleep(20 * time.Millisecond)
						continue
					}
					ok := (n <= max && st == 201 && bytes.Equal(b, want)) ||
						(n > max && (st == 500 || (st == 201 && bytes.Equal(b, want))))
					if !ok {
						bad.Add(1)
						mu.Lock()
						errs = append(errs, fmt.Sprintf("key %s n=%d: %d %q", key, n, st, b))
						mu.Unlock()
					}
					return
				}
			}()
		}
	}
	wg.Wait()
	if runs.Load() != keys {
		t.Errorf("handler ran %d times for %d keys", runs.Load(), keys)
	}
	if bad.Load() > 0 {
		t.Fatalf("%d bad answers: %v", bad.Load(), errs[:min(5, len(errs))])
	}
}

// Fencing: CompleteTx after the lease ran out and another took the key.
func TestReview83CompleteTxFencing(t *testing.T) {
	db, s := review83DB(t, "review83_fence")
	ctx := context.Background()
	g := idempotency.NewGuard(s, idempotency.Lease(600*time.Millisecond), idempotency.StoreTimeout(200*time.Millisecond), idempotency.MaxResponse(10))
	c, _, err := g.Begin(ctx, "sc", "fence", "fp")
	if err != nil || c == nil {
		t.Fatal(err)
	}
	// Another replica (another guard) takes the key once the lease ran out
	// here: simulate by expiring the row.
	if _, err := db.Exec(`UPDATE review83_fence SET expires_at = statement_timestamp() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	g2 := idempotency.NewGuard(s, idempotency.Lease(5*time.Second))
	c2, _, err := g2.Begin(ctx, "sc", "fence", "fp")
	if err != nil || c2 == nil {
		t.Fatalf("second begin: %v %v", c2, err)
	}
	for _, n := range []int{0, 10, 11} {
		tx, _ := db.BeginTx(ctx, nil)
		err = s.CompleteTx(ctx, tx, c, 200, nil, review83Body(n, 1))
		_ = tx.Rollback()
		if !errors.Is(err, idempotency.ErrNotOwner) {
			t.Fatalf("n=%d: CompleteTx of a claim another holds: %v", n, err)
		}
	}
	// The second claim completes with a big body: truncated.
	tx, _ := db.BeginTx(ctx, nil)
	if err := s.CompleteTx(ctx, tx, c2, 200, nil, review83Body(2<<20, 1)); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	_ = c2.Complete(ctx, idempotency.Record{Status: 200})
	_ = c.Release(ctx)
	_, rec, err := g2.Begin(ctx, "sc", "fence", "fp")
	if rec != nil || !errors.Is(err, idempotency.ErrNotReplayable) {
		t.Fatalf("repeat of a 2 MiB (over default 1 MiB) CompleteTx: rec=%v err=%v", rec != nil, err)
	}
}

// A zero claim passed to CompleteTx holds no row: ErrNotOwner.
func TestReview83CompleteTxZeroClaim(t *testing.T) {
	db, s := review83DB(t, "review83_zero")
	ctx := context.Background()
	// (With a row of key "" and token "" planted by s.Begin(ctx, "",
	// Record{}, lease), a zero claim completes it: unreachable through a
	// Guard, whose keys are scoped and tokens random.)
	tx, _ := db.BeginTx(ctx, nil)
	var zero idempotency.Claim
	err := s.CompleteTx(ctx, tx, &zero, 200, nil, []byte("x"))
	_ = tx.Rollback()
	t.Logf("zero claim CompleteTx: %v", err)
	if !errors.Is(err, idempotency.ErrNotOwner) {
		t.Errorf("a zero claim: %v, want ErrNotOwner", err)
	}
}
