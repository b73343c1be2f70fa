package idempotencystore_test

import (
	"context"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/idempotency"
)

// A request's claim sent to a frozen Redis times out (503). The SET NX sits
// in the server's socket and is applied at the thaw. The reaper tries to
// free it reapRounds times, a StoreTimeout apart, while the server is still
// frozen, then gives up. After the thaw a retry on another replica finds
// the orphan claim: how long is it refused (409) for a key that no one runs?
func TestReview58OrphanAfterFreezeBlocksOtherReplica(t *testing.T) {
	t.Run("scripts not cached", func(t *testing.T) { r58Orphan(t, false) })
	t.Run("scripts cached", func(t *testing.T) { r58Orphan(t, true) })
}

func r58Orphan(t *testing.T, cached bool) {
	srv := r58Start(t)
	ev := &r58Events{}
	gs := r58Guards(t, srv.Addr(), 2, ev, idempotency.Lease(3*time.Second), idempotency.StoreTimeout(100*time.Millisecond), idempotency.FailOpenAfter(-1))
	ctx := context.Background()
	// warm up: eviction policy read, connections
	for i, g := range gs {
		c, _, err := g.Begin(ctx, "s", "warm"+string(rune('a'+i)), "fp")
		if err != nil {
			t.Fatal(err)
		}
		_ = c.Complete(ctx, idempotency.Record{Status: 200})
		if cached { // loads deleteIfHeld
			c, _, _ = g.Begin(ctx, "s", "warm2"+string(rune('a'+i)), "fp")
			_ = c.Release(ctx)
		}
	}
	srv.Freeze()
	start := time.Now()
	_, _, err := gs[0].Begin(ctx, "s", "k", "fp")
	t.Logf("Begin on frozen: %v after %v", err, time.Since(start))
	if err == nil {
		t.Fatal("want a failure")
	}
	time.Sleep(1 * time.Second) // > reapRounds * StoreTimeout
	srv.Thaw()
	thaw := time.Now()
	var refused time.Duration
	for time.Since(thaw) < 5*time.Second {
		c, rec, err := gs[1].Begin(ctx, "s", "k", "fp")
		if err == nil && c != nil {
			t.Logf("retry on replica B ran %v after the thaw", time.Since(thaw))
			_ = c.Complete(ctx, idempotency.Record{Status: 201})
			break
		}
		refused = time.Since(thaw)
		_ = rec
		if err != nil && !r58Is(err, idempotency.ErrInProgress) {
			t.Logf("retry: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if refused > 500*time.Millisecond {
		t.Errorf("a retry on another replica was refused (409) for %v after the thaw: the key is held by an orphan claim no request runs under", refused)
	}
}
