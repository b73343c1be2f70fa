package idempotencystore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/redis/idempotencystore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
)

// Promise (CHANGELOG review165), on a real redis-server frozen with
// SIGSTOP: a claim a Begin sent to the frozen server and gave up on is
// freed after the thaw, even if the freeze was longer than the lease; and
// the reaping never frees a claim that a live request holds (the key
// claimed again later, on another replica, and on this one).
func TestReview167RealFreezeThenReap(t *testing.T) {
	const lease, st = 1500 * time.Millisecond, 200 * time.Millisecond
	srv := redistest.Start(t)
	for _, freeze := range []time.Duration{lease / 3, 2 * lease} {
		key := "k" + freeze.String()
		g1 := idempotency.NewGuard(idempotencystore.New(srv.Client(), "r167:"), idempotency.Lease(lease), idempotency.StoreTimeout(st), idempotency.FailOpenAfter(-1))
		g2 := idempotency.NewGuard(idempotencystore.New(srv.Client(), "r167:"), idempotency.Lease(lease), idempotency.StoreTimeout(st), idempotency.FailOpenAfter(-1))
		// Warm both clients' connections and the eviction checks.
		for _, g := range []*idempotency.Guard{g1, g2} {
			c, _, err := g.Begin(context.Background(), "", "warm"+key, "fp")
			if err != nil {
				t.Fatal(err)
			}
			_ = c.Release(context.Background())
		}
		srv.Freeze()
		if c, _, err := g1.Begin(context.Background(), "", key, "fp"); err == nil {
			srv.Thaw()
			t.Fatalf("Begin on a frozen server succeeded: %v", c)
		}
		time.Sleep(freeze)
		srv.Thaw()
		thawed := time.Now()
		var live *idempotency.Claim
		for time.Since(thawed) < 3*lease/4 {
			c, _, err := g2.Begin(context.Background(), "", key, "fp")
			if err == nil && c != nil {
				live = c
				break
			}
			time.Sleep(25 * time.Millisecond)
		}
		if live == nil {
			t.Errorf("freeze %v: the given-up claim was not freed within 3/4 of a lease of the thaw", freeze)
			continue
		}
		t.Logf("freeze %v: free %v after the thaw", freeze, time.Since(thawed).Round(time.Millisecond))
		// live (on g2) now runs, renewing, for 2 leases: nobody else may
		// claim the key meanwhile, whatever g1's reaping does.
		end := time.Now().Add(2 * lease)
		for time.Now().Before(end) {
			for name, g := range map[string]*idempotency.Guard{"same replica as the orphan (g1)": g1, "holder's replica (g2)": g2} {
				c, _, err := g.Begin(context.Background(), "", key, "fp")
				if c != nil {
					t.Errorf("freeze %v: %s claimed the key while a live request held it", freeze, name)
					_ = c.Release(context.Background())
				} else if err != nil && !errors.Is(err, idempotency.ErrInProgress) {
					t.Logf("%s: %v", name, err)
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err := live.Complete(context.Background(), idempotency.Record{Status: 200}); err != nil {
			t.Errorf("freeze %v: the live request's result was not saved: %v", freeze, err)
		}
	}
}
