package idempotencystore_test

// Review 48: CompleteTx's statement runs in the handler's transaction, where
// PostgreSQL's now() is the time the transaction began, not the time of the
// statement.

import (
	"context"
	"database/sql"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/sql/idempotencystore"
)

func r48Server(t *testing.T) (*pgServer, *sql.DB, *idempotencystore.Store) {
	pg := startPostgres(t)
	db, store := pg.open()
	r48Orders(t, db)
	return pg, db, store
}

// TestReview48TTLCountsFromTheCommit: a result is kept for TTL ("TTL sets
// how long a result is kept for replay"). The handler's transaction is
// begun as the handler begins (as docs/idempotency.md allows) and does
// 1.5 s of work under a renewed lease; TTL is 1 s. A retry right after the
// 201 must be replayed, not run again.
func TestReview48TTLCountsFromTheCommit(t *testing.T) {
	_, db, store := r48Server(t)
	var runs, commits atomic.Int64
	ev := &r48Events{}
	h := r48Handler(db, store, &runs, &commits, r48Steps{afterEffect: func(context.Context) { time.Sleep(1500 * time.Millisecond) }})
	srv := httptest.NewServer(idempotency.Middleware(store, r48Opts(ev, idempotency.TTL(time.Second),
		idempotency.Lease(600*time.Millisecond), idempotency.StoreTimeout(100*time.Millisecond))...)(h))
	t.Cleanup(srv.Close)
	client := &http.Client{Timeout: 10 * time.Second}
	code, _, body, _ := r48Post(client, srv.URL, "ttl")
	require.Equal(t, http.StatusCreated, code, body)
	var left float64
	require.NoError(t, db.QueryRow(`SELECT extract(epoch FROM expires_at - now()) FROM idem`).Scan(&left))
	t.Logf("right after the commit, the record has %.2f s of its 1 s TTL left", left)
	code2, replay, body2, _ := r48Post(client, srv.URL, "ttl")
	t.Logf("retry at once: %d replay=%v %s; orders %d", code2, replay, body2, r48Count(t, db, `SELECT count(*) FROM orders`))
	assert.Greater(t, left, 0.5, "the TTL runs from the commit")
	assert.True(t, replay, "a retry within the TTL is replayed")
	assert.Equal(t, 1, r48Count(t, db, `SELECT count(*) FROM orders`), "one order")
}

// TestReview48CompleteTxAfterTheLeaseRanOut: "It returns
// idempotency.ErrNotOwner if the key no longer holds the claim (its lease
// ran out)". The claim's lease (300 ms) runs out before CompleteTx, in a
// transaction begun while it held; no one has taken the key.
func TestReview48CompleteTxAfterTheLeaseRanOut(t *testing.T) {
	_, db, store := r48Server(t)
	ctx := t.Context()
	claim := idempotency.Record{Fingerprint: "fp", Token: "tok"}
	found, err := store.Begin(ctx, "k", claim, 300*time.Millisecond)
	require.NoError(t, err)
	require.Nil(t, found)
	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer tx.Rollback()
	_, err = tx.Exec(`INSERT INTO orders DEFAULT VALUES`)
	require.NoError(t, err)
	time.Sleep(600 * time.Millisecond)
	var expired bool
	require.NoError(t, db.QueryRow(`SELECT expires_at <= now() FROM idem WHERE key = 'k'`).Scan(&expired))
	require.True(t, expired, "the lease ran out, as the database sees it")
	c := &idempotency.Claim{Key: "k", Record: claim, TTL: time.Hour}
	err = store.CompleteTx(ctx, tx, c, http.StatusCreated, nil, []byte("x"))
	t.Logf("CompleteTx 300 ms after the lease ran out: %v", err)
	assert.ErrorIs(t, err, idempotency.ErrNotOwner)
}
