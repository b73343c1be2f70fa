package idempotencystore_test

// Review 48: the rig of the review's tests (a handler as docs/idempotency.md
// writes it, counting what it does).

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/sql/idempotencystore"
)

// r48Steps are hooks of r48Handler.
type r48Steps struct {
	afterEffect  func(ctx context.Context) // after the order is inserted, before CompleteTx
	beforeCommit func(ctx context.Context) // after CompleteTx
}

// r48Handler is the documented exactly-once handler: the order and its
// record in one transaction, begun under the lease's deadline.
func r48Handler(db *sql.DB, store *idempotencystore.Store, runs, commits *atomic.Int64, steps r48Steps) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		claim := idempotency.FromContext(r.Context())
		ctx, cancel := claim.WithLeaseDeadline(r.Context())
		defer cancel()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			http.Error(w, "begin: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		defer tx.Rollback()
		var id int
		if err := tx.QueryRowContext(ctx, `INSERT INTO orders DEFAULT VALUES RETURNING id`).Scan(&id); err != nil {
			claim.Abandon()
			http.Error(w, "effect: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		if steps.afterEffect != nil {
			steps.afterEffect(ctx)
		}
		resp := []byte(fmt.Sprintf(`{"order":%d}`, id))
		if err := store.CompleteTx(ctx, tx, claim, http.StatusCreated, nil, resp); err != nil {
			claim.Abandon()
			http.Error(w, "complete: "+err.Error(), http.StatusInternalServerError)
			return
		}
		if steps.beforeCommit != nil {
			steps.beforeCommit(ctx)
		}
		if err := tx.Commit(); err != nil {
			claim.Abandon()
			http.Error(w, "commit: "+err.Error(), http.StatusInternalServerError)
			return
		}
		commits.Add(1)
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(resp)
	}
}

// r48Events counts a guard's events by kind.
type r48Events struct {
	mu   sync.Mutex
	n    map[resilience.EventKind]int
	errs map[resilience.EventKind][]string
}

func (e *r48Events) OnEvent(ev resilience.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.n == nil {
		e.n = map[resilience.EventKind]int{}
		e.errs = map[resilience.EventKind][]string{}
	}
	e.n[ev.Kind]++
	if ev.Err != nil && len(e.errs[ev.Kind]) < 5 {
		e.errs[ev.Kind] = append(e.errs[ev.Kind], ev.Err.Error())
	}
}

func (e *r48Events) count(k resilience.EventKind) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n[k]
}

func (e *r48Events) String() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return fmt.Sprintf("%v %v", e.n, e.errs)
}

func r48Opts(ev *r48Events, opts ...idempotency.Option) []idempotency.Option {
	return append([]idempotency.Option{idempotency.SharedKeys(), idempotency.WithLogger(slog.New(slog.DiscardHandler)),
		idempotency.WithListener(ev)}, opts...)
}

func r48Orders(t *testing.T, db *sql.DB) {
	_, err := db.Exec(`CREATE TABLE IF NOT EXISTS orders (id serial PRIMARY KEY, at timestamptz DEFAULT clock_timestamp())`)
	require.NoError(t, err)
}

func r48Count(t *testing.T, db *sql.DB, q string) int {
	var n int
	require.NoError(t, db.QueryRow(q).Scan(&n))
	return n
}

// r48Post posts key and returns the status, whether it was a replay, and the body.
func r48Post(client *http.Client, url, key string) (int, bool, string, time.Duration) {
	req, _ := http.NewRequest(http.MethodPost, url+"/orders", strings.NewReader(`{"sku":"a"}`))
	req.Header.Set(idempotency.Header, key)
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return 0, false, err.Error(), time.Since(start)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get(idempotency.ReplayedHeader) == "true", string(body), time.Since(start)
}
