package idempotency_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/idempotency"
)

// r25LateStore is a store whose first `late` Begins time out for their
// caller and land afterwards (a write stuck in a slow network path), each
// after its own delay.
type r25LateStore struct {
	*idempotency.MemoryStore
	mu     sync.Mutex
	delays []time.Duration
}

func (s *r25LateStore) Begin(ctx context.Context, key string, claim idempotency.Record, lease time.Duration) (*idempotency.Record, error) {
	s.mu.Lock()
	var d time.Duration
	late := len(s.delays) > 0
	if late {
		d, s.delays = s.delays[0], s.delays[1:]
	}
	s.mu.Unlock()
	if !late {
		return s.MemoryStore.Begin(ctx, key, claim, lease)
	}
	go func() {
		time.Sleep(d)
		_, _ = s.MemoryStore.Begin(context.Background(), key, claim, lease)
	}()
	<-ctx.Done()
	return nil, ctx.Err()
}

// Two Begins of one key time out in a row (the caller retried the 503 of
// the first); the first's write lands late, the second's never does (the
// key is taken by then). The guard remembers only the last claim of a key
// as an orphan: reap's Release of it gets ErrNotOwner forever (another
// token holds the key) and the next Begin of the key drops it without
// freeing the one that holds it. The first's claim, which nobody holds,
// then keeps the key for a whole lease: retries get "in progress" (409)
// throughout. The fix of 83b78e0 promises "the next round, or the next
// Begin of its key, frees it".
func TestReview25_TwoTimedOutBeginsLeaveTheFirstsLateClaim(t *testing.T) {
	const st = 40 * time.Millisecond
	t.Run("control_one_late_begin", func(t *testing.T) { r25Late(t, []time.Duration{3 * st}) })
	t.Run("two_late_begins", func(t *testing.T) { r25Late(t, []time.Duration{3 * st, 10 * st}) })
}

func r25Late(t *testing.T, delays []time.Duration) {
	const st = 40 * time.Millisecond
	store := &r25LateStore{MemoryStore: idempotency.NewMemoryStore(0), delays: delays}
	g := idempotency.NewGuard(store, idempotency.StoreTimeout(st), idempotency.Lease(3*time.Second))
	ctx := context.Background()

	for range delays {
		_, _, err := g.Begin(ctx, "s", "k", "fp")
		require.Error(t, err, "the Begin times out")
	}
	time.Sleep(15 * st) // both writes were tried; the reap rounds are over

	deadline := time.Now().Add(time.Second)
	var last error
	for time.Now().Before(deadline) {
		c, _, err := g.Begin(ctx, "s", "k", "fp")
		if err == nil {
			require.NotNil(t, c)
			c.Release(ctx)
			return
		}
		last = err
		time.Sleep(st)
	}
	assert.Fail(t, "a retry of the key is refused for a lease by a claim nobody holds", "last error: %v (in progress: %v)", last, errors.Is(last, idempotency.ErrInProgress))
}
