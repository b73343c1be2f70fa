package idempotencystore_test

// Review 62: a claim that began on PostgreSQL and moved to the replica's
// own records (its renewals failing, the idempotency table locked) is
// completed with CompleteTx: is the effect still fenced?

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/sql/idempotencystore"
)

// r62Handler: slow work first (wait), then the documented transaction.
func r62Handler(db *sql.DB, store *idempotencystore.Store, runs, commits *atomic.Int64, wait func(ctx context.Context), txAtStart, lateCtx bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		claim := idempotency.FromContext(r.Context())
		if lateCtx && wait != nil {
			wait(r.Context()) // slow work (a call to a partner) before the transaction
			wait = nil
		}
		ctx, cancel := claim.WithLeaseDeadline(r.Context())
		defer cancel()
		var tx *sql.Tx
		var err error
		if txAtStart {
			tx, err = db.BeginTx(ctx, nil)
			if err != nil {
				http.Error(w, "begin: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		if wait != nil {
			wait(ctx)
		}
		if !txAtStart {
			tx, err = db.BeginTx(ctx, nil)
			if err != nil {
				http.Error(w, "begin: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		defer tx.Rollback()
		var id int
		if err := tx.QueryRowContext(ctx, `INSERT INTO orders DEFAULT VALUES RETURNING id`).Scan(&id); err != nil {
			claim.Abandon()
			http.Error(w, "effect: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		resp := []byte(fmt.Sprintf(`{"order":%d}`, id))
		if err := store.CompleteTx(ctx, tx, claim, http.StatusCreated, nil, resp); err != nil {
			claim.Abandon()
			http.Error(w, "complete: "+err.Error(), http.StatusInternalServerError)
			return
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

func TestReview62ClaimMovedLocalIsNotFencedByCompleteTx(t *testing.T) {
	for _, mode := range []struct{ txAtStart, lateCtx bool }{{false, false}, {false, true}} {
		txAtStart, lateCtx := mode.txAtStart, mode.lateCtx
		t.Run(fmt.Sprintf("txAtStart=%v,lateCtx=%v", txAtStart, lateCtx), func(t *testing.T) {
			pg, db, storeB := r48Server(t)
			dbA, err := sql.Open("pgx", pg.dsn()) // A's store on a pool of its own, as the package doc advises
			require.NoError(t, err)
			t.Cleanup(func() { _ = dbA.Close() })
			storeA := idempotencystore.New(dbA, "idem")

			var runsA, commitsA, runsB, commitsB atomic.Int64
			moved := make(chan struct{})
			proceed := make(chan struct{})
			var wasMoved atomic.Bool
			evA, evB := &r48Events{}, &r48Events{}
			wait := func(ctx context.Context) {
				deadline := time.Now().Add(8 * time.Second)
				for !strings.Contains(evA.String(), "held in this process's records") && time.Now().Before(deadline) {
					time.Sleep(20 * time.Millisecond)
				}
				wasMoved.Store(strings.Contains(evA.String(), "held in this process's records"))
				close(moved)
				<-proceed
			}
			opts := func(ev *r48Events, fo time.Duration) []idempotency.Option {
				return r48Opts(ev, idempotency.Lease(1500*time.Millisecond), idempotency.StoreTimeout(200*time.Millisecond), idempotency.FailOpenAfter(fo))
			}
			a := httptest.NewServer(idempotency.Middleware(storeA, opts(evA, 300*time.Millisecond)...)(r62Handler(db, storeA, &runsA, &commitsA, wait, txAtStart, lateCtx)))
			defer a.Close()
			b := httptest.NewServer(idempotency.Middleware(storeB, opts(evB, -1)...)(r62Handler(db, storeB, &runsB, &commitsB, nil, false, false)))
			defer b.Close()

			type res struct {
				code   int
				replay bool
				body   string
			}
			ach := make(chan res, 1)
			go func() {
				code, rep, body, _ := r48Post(http.DefaultClient, a.URL, "k1")
				ach <- res{code, rep, body}
			}()
			for runsA.Load() == 0 {
				time.Sleep(5 * time.Millisecond)
			}
			// The idempotency table locked (a migration, a VACUUM FULL, an admin's LOCK): A's renewals fail.
			admin, err := sql.Open("pgx", pg.dsn())
			require.NoError(t, err)
			defer admin.Close()
			lockTx, err := admin.Begin()
			require.NoError(t, err)
			_, err = lockTx.Exec(`LOCK TABLE idem IN ACCESS EXCLUSIVE MODE`)
			require.NoError(t, err)
			<-moved
			t.Logf("A's claim moved to its records: %v; events A %s", wasMoved.Load(), evA)
			require.NoError(t, lockTx.Rollback()) // the table back
			time.Sleep(400 * time.Millisecond)    // past the row's expiry as the database counts it
			// A repeat to replica B, whose store is healthy.
			codeB, repB, bodyB, _ := r48Post(http.DefaultClient, b.URL, "k1")
			t.Logf("B: %d replay=%v %s", codeB, repB, bodyB)
			close(proceed)
			ra := <-ach
			t.Logf("A: %d replay=%v %s", ra.code, ra.replay, ra.body)
			orders := r48Count(t, db, `SELECT count(*) FROM orders`)
			t.Logf("orders committed: %d (A commits %d, B commits %d)", orders, commitsA.Load(), commitsB.Load())
			require.LessOrEqual(t, orders, 1, "one key, %d orders: CompleteTx did not fence the claim that moved to local records", orders)
		})
	}
}
