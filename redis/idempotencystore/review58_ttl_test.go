package idempotencystore_test

import (
	"context"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// TTL accepts any positive duration; the Redis store sends it as whole
// milliseconds (PX 0 for one under a millisecond, which Redis refuses).
func TestReview58SubMillisecondTTL(t *testing.T) {
	srv := r58Start(t)
	ev := &r58Events{}
	g := r58Guards(t, srv.Addr(), 1, ev, idempotency.TTL(500*time.Microsecond), idempotency.Lease(600*time.Millisecond), idempotency.StoreTimeout(100*time.Millisecond))[0]
	c, _, err := g.Begin(context.Background(), "s", "ttl", "fp")
	if err != nil {
		t.Fatal(err)
	}
	err = c.Complete(context.Background(), idempotency.Record{Status: 201})
	t.Logf("Complete: %v; not stored %d", err, ev.count(resilience.EventNotStored))
	if err != nil {
		t.Errorf("a result with TTL 500µs could not be saved on Redis: %v", err)
	}
}
