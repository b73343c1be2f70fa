package idempotencystore_test

import (
	"errors"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/redis/idempotencystore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
)

// A request refused (503) while Redis was frozen did not run; once Redis
// is back, its retry runs. The claim its Begin sent into the frozen
// server is applied only at the thaw, and the reaping that is to free it
// gives up "once the claim's lease could have run out", counted from the
// Begin, not from the thaw: frozen longer than the lease, the orphan
// claim holds the key for a whole lease after the thaw, and retries on
// other replicas get 409 for a request that never ran.
func TestReview165RetryAfterALongFreezeIsNotHeldByAnOrphan(t *testing.T) {
	const lease, st = 2 * time.Second, 200 * time.Millisecond
	srv := redistest.Start(t)
	opts := []idempotency.Option{idempotency.Lease(lease), idempotency.StoreTimeout(st), idempotency.FailOpenAfter(-1)}
	ga := idempotency.NewGuard(idempotencystore.New(r165Client(t, srv.Addr()), ""), opts...)
	gb := idempotency.NewGuard(idempotencystore.New(r165Client(t, srv.Addr()), ""), opts...)
	for _, g := range []*idempotency.Guard{ga, gb} { // warm: policy read, pooled connections
		if c, _, err := g.Begin(t.Context(), "s", "warm", "w"); c != nil {
			_ = c.Release(t.Context())
		} else if err != nil {
			t.Fatal(err)
		}
	}
	srv.Freeze()
	c, _, err := ga.Begin(t.Context(), "s", "k", "fp")
	if c != nil || err == nil {
		t.Fatalf("Begin on a frozen server: %v %v", c, err)
	}
	time.Sleep(lease + 600*time.Millisecond)
	srv.Thaw()
	thawed := time.Now()
	var ran time.Duration = -1
	conflicts := 0
	for time.Since(thawed) < lease+time.Second {
		c, _, err := gb.Begin(t.Context(), "s", "k", "fp")
		if c != nil {
			ran = time.Since(thawed)
			_ = c.Complete(t.Context(), idempotency.Record{Status: 201})
			break
		}
		if errors.Is(err, idempotency.ErrInProgress) {
			conflicts++
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("the retry ran %v after the thaw, after %d × 409", ran, conflicts)
	if ran < 0 || ran > 2*st+200*time.Millisecond {
		t.Errorf("a request that never ran was refused 409 for %v after the thaw (%d times; lease %v): held by the claim of a Begin that had given up", ran, conflicts, lease)
	}
}
