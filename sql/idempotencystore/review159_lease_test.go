package idempotencystore_test

import (
	"context"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/sql/idempotencystore"
)

// TestReview159_SubMillisecondLeaseIsNotCutShort: the Store interface
// promises that Begin "claims key with claim (not Done) for lease". The
// store writes the lease in whole milliseconds, rounded down (ms:
// d.Milliseconds()), so a claim for 900 µs is written already expired
// (expires_at = statement_timestamp() + 0): it runs out before 900 µs
// have passed since Begin was called, and another Begin may take the key
// over while the first claim's lease still runs. The same cut, up to
// 1 ms, shortens every lease and TTL (fix: round up).
func TestReview159_SubMillisecondLeaseIsNotCutShort(t *testing.T) {
	s := startPostgres(t)
	db := r159Open(t, s)
	st := idempotencystore.New(db, "r159_trunc")
	ctx := context.Background()
	if err := st.CreateTable(ctx); err != nil {
		t.Fatal(err)
	}
	const lease = 900 * time.Microsecond
	bad, n := 0, 10
	var worst time.Duration
	for i := range n {
		key := "k" + string(rune('a'+i))
		a := idempotency.Record{Fingerprint: "f", Token: "tokenA"}
		start := time.Now() // the same machine's clock as the server's
		found, err := st.Begin(ctx, key, a, lease)
		if err != nil || found != nil {
			t.Fatalf("first Begin: %v %v", found, err)
		}
		var exp time.Time
		if err := db.QueryRow(`SELECT expires_at FROM r159_trunc WHERE key = $1`, key).Scan(&exp); err != nil {
			t.Fatal(err)
		}
		// The claim was written after start: its lease runs to start+lease at least.
		if short := start.Add(lease).Sub(exp); short > 0 {
			bad++
			worst = max(worst, short)
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d claims for %v were written to run out before %v had passed since Begin was called (by up to %v): the store rounds the lease down to whole ms", bad, n, lease, lease, worst)
	}
}

// TestReview159_GuardLeaseDeadlineNotPastTheStores: LeaseDeadline
// promises "when the claim's lease, as last renewed, runs out: after it,
// another request may take the key" (so not before). With a lease of
// whole milliseconds and a fraction, the store keeps the claim for the
// whole milliseconds only, and the guard's deadline, taken from before
// the claim was asked, can fall after the row's expires_at: for that
// moment the guard (and WithLeaseDeadline) believe the key held while
// another replica may take it.
func TestReview159_GuardLeaseDeadlineNotPastTheStores(t *testing.T) {
	s := startPostgres(t)
	db := r159Open(t, s)
	st := idempotencystore.New(db, "r159_deadline")
	ctx := context.Background()
	if err := st.CreateTable(ctx); err != nil {
		t.Fatal(err)
	}
	g := idempotency.NewGuard(st, idempotency.Lease(600*time.Millisecond+999*time.Microsecond), idempotency.StoreTimeout(100*time.Millisecond))
	const n = 10
	bad := 0
	var worst time.Duration
	for i := range n {
		key := "k" + string(rune('a'+i))
		c, _, err := g.Begin(ctx, "s", key, "fp")
		if err != nil || c == nil {
			t.Fatalf("Begin: %v", err)
		}
		var exp time.Time
		if err := db.QueryRow(`SELECT expires_at FROM r159_deadline WHERE key = $1`, c.Key).Scan(&exp); err != nil {
			t.Fatal(err)
		}
		if d := c.LeaseDeadline().Sub(exp); d > 0 {
			bad++
			worst = max(worst, d)
		}
		c.Release(ctx)
	}
	if bad > 0 {
		t.Errorf("%d of %d claims: the guard's LeaseDeadline fell after the row's expires_at (by up to %v): the key was free in the store while the guard believed it held", bad, n, worst)
	}
}
