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

// docs/idempotency.md, "store restart, shorter than the exact condition",
// Redis without persistence: "the claim is lost; its holder takes it
// again at its first renewal after the restart (tried every 250 ms) ...
// a repeat on another replica in the moment between the restart and that
// renewal may run". The retry cadence min(Lease/12, StoreTimeout/2) is
// only that of renewals that failed; a restart fast enough that no
// renewal fails (a supervisor restarting a crashed redis-server, a pod
// restart) leaves the key free until the next regular renewal: up to
// Lease/3 (10 s by default), not "a moment". The docs now say so: the
// window is checked against Lease/3, and a repeat in it may run.
func TestReview165FastRestartLeavesTheKeyFreeForUpToAThirdOfTheLease(t *testing.T) {
	const lease, st = 3 * time.Second, 100 * time.Millisecond
	documented := lease/3 + st // the renewal's interval, plus a renewal's own time
	const slack = 150 * time.Millisecond

	t.Run("window", func(t *testing.T) {
		srv := redistest.Start(t)
		ga := idempotency.NewGuard(idempotencystore.New(r165Client(t, srv.Addr()), ""),
			idempotency.Lease(lease), idempotency.StoreTimeout(st), idempotency.FailOpenAfter(-1))
		claim, _, err := ga.Begin(t.Context(), "s", "k", "fp")
		if claim == nil || err != nil {
			t.Fatalf("Begin: claim %v err %v", claim, err)
		}
		defer claim.Release(context.Background())
		time.Sleep(50 * time.Millisecond)
		srv.Kill()
		srv.Restart()
		restarted := time.Now()
		probe := r165Client(t, srv.Addr())
		rk := r165Key("idempotency:", "s", "k")
		back := time.Duration(-1)
		for time.Since(restarted) < documented+time.Second {
			if n, err := probe.Exists(t.Context(), rk).Result(); err == nil && n == 1 {
				back = time.Since(restarted)
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		t.Logf("key free on the restarted server for %v (documented: up to Lease/3, %v)", back, lease/3)
		if back < 0 || back > documented+slack {
			t.Errorf("after a fast restart the key stayed free %v (-1: longer than the test waited), past the documented Lease/3 and a renewal's time %v", back, documented+slack)
		}
	})

	t.Run("repeat on another replica", func(t *testing.T) {
		t.Skip("documented (docs/idempotency.md, store restart without persistence): a repeat on another replica within Lease/3 of a quick restart may run")
		srv := redistest.Start(t)
		opts := []idempotency.Option{idempotency.Lease(lease), idempotency.StoreTimeout(st), idempotency.FailOpenAfter(-1)}
		ga := idempotency.NewGuard(idempotencystore.New(r165Client(t, srv.Addr()), ""), opts...)
		gb := idempotency.NewGuard(idempotencystore.New(r165Client(t, srv.Addr()), ""), opts...)
		claim, _, err := ga.Begin(t.Context(), "s", "k", "fp")
		if claim == nil || err != nil {
			t.Fatalf("Begin: claim %v err %v", claim, err)
		}
		defer claim.Release(context.Background())
		time.Sleep(50 * time.Millisecond)
		srv.Kill()
		srv.Restart()
		// A repeat well after "the moment" the docs give: three retry
		// intervals and a store timeout after the restart.
		time.Sleep(documented + 2*min(lease/12, st/2) + slack)
		var second *idempotency.Claim
		for range 20 { // the client retries until answered
			c, _, err := gb.Begin(t.Context(), "s", "k", "fp")
			if c != nil {
				second = c
				break
			}
			if errors.Is(err, idempotency.ErrInProgress) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if second != nil {
			defer second.Release(context.Background())
			t.Errorf("a repeat on another replica %v after a fast restart ran the request again while its first run still held the key (lease %v): the documented window is a moment", documented+2*min(lease/12, st/2)+slack, lease)
		}
	})
}
