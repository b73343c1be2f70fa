package idempotencystore_test

// Review 24: Guard.reap (155e8ea) against PostgreSQL, where a Begin that
// the guard gave up on goes on in the server (pgx's default context
// handling sets a deadline on the socket; it sends no cancel request).

import (
	"database/sql"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/sql/idempotencystore"
)

// Holds (pgx stdlib cancels the blocked INSERT on the store timeout, so
// nothing lands late). A repeat comes on replica A just after the lease of the key's claim ran
// out, while that claim's row is locked by a transaction (a handler's
// CompleteTx whose commit is slow, then rolled back at the lease's end,
// and Abandon): A's Begin waits for the row lock in the INSERT, gives up
// after the store timeout (503), and leaves its claim to be freed. The
// reaper's first round asks to free it before the INSERT has run: the
// DELETE matches no row (the row still has the old token), ErrNotOwner,
// and the orphan is forgotten. The transaction rolls back, the INSERT goes
// through: the key is claimed by a request that is not running, and A
// itself now refuses it (409) for a whole lease. Before 155e8ea the orphan
// stayed noted, and A's next Begin of the key freed it and ran.
func TestReview24ReapAndABeginBlockedOnARowLock(t *testing.T) {
	dsn := os.Getenv("RESILIENCEKIT_POSTGRES_DSN")
	if dsn == "" {
		t.Skip("RESILIENCEKIT_POSTGRES_DSN is not set")
	}
	db, err := sql.Open("pgx", dsn)
	require.NoError(t, err)
	defer db.Close()
	ctx := t.Context()
	_, _ = db.ExecContext(ctx, `DROP TABLE IF EXISTS r24_reap`)
	store := idempotencystore.New(db, "r24_reap")
	require.NoError(t, store.CreateTable(ctx))

	const scope, key, fp = "caller", "order-24", "fp-24"
	probe, _, err := idempotency.NewGuard(idempotency.NewMemoryStore(0)).Begin(ctx, scope, key, fp)
	require.NoError(t, err)
	skey := probe.Key // the key as stored
	require.NoError(t, probe.Release(ctx))

	// The first request's claim, about to run out, its row locked by its
	// handler's transaction.
	_, err = store.Begin(ctx, skey, idempotency.Record{Fingerprint: fp, Token: "first"}, 300*time.Millisecond)
	require.NoError(t, err)
	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	_, err = tx.ExecContext(ctx, `SELECT 1 FROM r24_reap WHERE key = $1 FOR UPDATE`, skey)
	require.NoError(t, err)
	time.Sleep(400 * time.Millisecond) // the lease has run out

	const lease, st = 3 * time.Second, 200 * time.Millisecond
	a := idempotency.NewGuard(store, idempotency.Lease(lease), idempotency.StoreTimeout(st))
	_, _, err = a.Begin(ctx, scope, key, fp)
	require.Error(t, err) // gave up after the store timeout: 503
	t.Logf("A's Begin: %v", err)
	time.Sleep(5 * st) // every reap round over
	require.NoError(t, tx.Rollback())
	var token string
	for range 50 { // the INSERT, unblocked, lands
		if db.QueryRowContext(ctx, `SELECT token FROM r24_reap WHERE key = $1 AND expires_at > now()`, skey).Scan(&token) == nil && token != "first" {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("the key now holds the claim of token %q", token)

	// The client's retries on A.
	start := time.Now()
	var errs []error
	for time.Since(start) < lease+time.Second {
		c, _, err := a.Begin(ctx, scope, key, fp)
		errs = append(errs, err)
		if err == nil {
			require.NoError(t, c.Complete(ctx, idempotency.Record{Status: 201}))
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Logf("A's retries over %v: %v", time.Since(start).Round(time.Millisecond), errs)
	assert.NoError(t, errs[0], "A's next Begin of the key should free the claim A's own Begin left, and run")
}
