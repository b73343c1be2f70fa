package idempotencystore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/sql/idempotencystore"
)

// TestReview159_DeleteExpiredRacesATakeover: DeleteExpired removes "the
// rows whose lease or TTL has run out", and only those: a claim that takes
// over an expired key at the same moment must survive it (Begin answered
// nil: the key is held), else a third request runs the key again while
// the second's handler runs.
func TestReview159_DeleteExpiredRacesATakeover(t *testing.T) {
	s := startPostgres(t)
	db := r159Open(t, s)
	db.SetMaxOpenConns(8)
	st := idempotencystore.New(db, "r159_reap")
	ctx := context.Background()
	if err := st.CreateTable(ctx); err != nil {
		t.Fatal(err)
	}
	const n = 40
	for i := range n {
		key := fmt.Sprintf("k%d", i)
		if found, err := st.Begin(ctx, key, idempotency.Record{Fingerprint: "f", Token: "old"}, 2*time.Millisecond); err != nil || found != nil {
			t.Fatal(found, err)
		}
	}
	time.Sleep(10 * time.Millisecond) // every old claim expired
	var wg sync.WaitGroup
	claimed := make([]bool, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			found, err := st.Begin(ctx, fmt.Sprintf("k%d", i), idempotency.Record{Fingerprint: "f", Token: "new"}, 10*time.Second)
			claimed[i] = err == nil && found == nil
			if err != nil {
				t.Errorf("k%d: %v", i, err)
			}
		}()
		if i%5 == 0 {
			wg.Add(1)
			go func() { defer wg.Done(); st.DeleteExpired(ctx) }()
		}
	}
	wg.Wait()
	st.DeleteExpired(ctx)
	for i := range n {
		key := fmt.Sprintf("k%d", i)
		found, err := st.Begin(ctx, key, idempotency.Record{Fingerprint: "f", Token: "third"}, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if claimed[i] && (found == nil || found.Token != "new") {
			t.Errorf("%s: the takeover's claim did not survive DeleteExpired: a third Begin found %v", key, found)
		}
	}
}
