package idempotencystore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/idempotency"
)

// CompleteTx on a store claim whose lease ran out and whose key another
// replica took: ErrNotOwner, nothing written, the other's claim intact.
// Then a local claim (the guard failed open, the server down): CompleteTx
// returns nil without touching tx, and the result is kept locally.
func TestReview49_CompleteTxFencesAndLocal(t *testing.T) {
	pg := startPostgres(t)
	db, store := pg.open()
	ctx := context.Background()
	opts := []idempotency.Option{idempotency.Lease(3 * time.Second), idempotency.StoreTimeout(500 * time.Millisecond), idempotency.FailOpenAfter(time.Second)}
	g1 := idempotency.NewGuard(store, opts...)
	g2 := idempotency.NewGuard(store, opts...)
	c1, _, err := g1.Begin(ctx, "s", "k", "fp")
	if err != nil || c1 == nil {
		t.Fatal(err)
	}
	if c1.Local() {
		t.Fatal("c1 local")
	}
	if _, err := db.Exec(`UPDATE idem SET expires_at = statement_timestamp() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	c2, _, err := g2.Begin(ctx, "s", "k", "fp")
	if err != nil || c2 == nil {
		t.Fatalf("g2 did not take the expired key: %v", err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = store.CompleteTx(ctx, tx, c1, 201, nil, []byte("one"))
	_ = tx.Rollback()
	if !errors.Is(err, idempotency.ErrNotOwner) {
		t.Errorf("CompleteTx of a claim whose key another took: %v, want ErrNotOwner", err)
	}
	c1.Abandon()
	c1.Complete(ctx, idempotency.Record{Status: 201})
	tx, _ = db.BeginTx(ctx, nil)
	if err := store.CompleteTx(ctx, tx, c2, 201, nil, []byte("two")); err != nil {
		t.Fatalf("c2 CompleteTx: %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	c2.Complete(ctx, idempotency.Record{Status: 201, Body: []byte("two")})
	_, rec, err := g1.Begin(ctx, "s", "k", "fp")
	if rec == nil || string(rec.Body) != "two" {
		t.Errorf("replay after fencing: %+v %v", rec, err)
	}

	// Server down: fail open.
	pg.Kill()
	g1.Begin(ctx, "s", "w1", "fp")
	// FailOpenAfter (1 s) counts from the first failure the guard saw,
	// which a loaded machine may report a while after the kill: poll, up
	// to FailOpenAfter and a StoreTimeout after the first try, and more.
	var c3 *idempotency.Claim
	for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		c3, _, err = g1.Begin(ctx, "s", "k3", "fp")
		if c3 != nil || time.Now().After(deadline) {
			break
		}
	}
	if c3 == nil || !c3.Local() {
		t.Fatalf("no local claim: %v", err)
	}
	if err := store.CompleteTx(ctx, nil, c3, 201, nil, []byte("three")); err != nil {
		t.Errorf("CompleteTx of a local claim: %v", err)
	}
	c3.CompleteLater(ctx, idempotency.Record{Status: 201, Body: []byte("three")})
	c4, rec, err := g1.Begin(ctx, "s", "k3", "fp")
	if c4 != nil || rec == nil || string(rec.Body) != "three" {
		t.Errorf("repeat of a local claim on the same process: claim %v rec %+v err %v", c4 != nil, rec, err)
	}
	pg.Restart()
	time.Sleep(4 * time.Second)
	for range 5 {
		if c, _, _ := g1.Begin(ctx, "s", "probe-"+time.Now().String(), "fp"); c != nil {
			c.Complete(ctx, idempotency.Record{Status: 200})
		}
		time.Sleep(1100 * time.Millisecond)
	}
	c5, rec, err := g1.Begin(ctx, "s", "k3", "fp")
	if c5 != nil {
		t.Errorf("same process, server back: the local key's repeat ran again")
		c5.Complete(ctx, idempotency.Record{Status: 201})
	} else {
		t.Logf("same process, server back: rec %v err %v", rec != nil, err)
	}
	c6, _, err := g2.Begin(ctx, "s", "k3", "fp")
	if c6 != nil {
		t.Logf("other replica, server back: runs again (documented)")
		c6.Release(ctx)
	} else {
		t.Logf("other replica: %v", err)
	}
}
