package idempotencystore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/redis/idempotencystore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
)

// A real Redis frozen (SIGSTOP): no request is refused later than
// FailOpenAfter + a StoreTimeout or two after the freeze; after the thaw
// the key of the request that found the freeze (its claim queued in the
// frozen server's socket) is looked at on the same replica.
func TestReview29RedisFrozenThenThawed(t *testing.T) {
	srv := redistest.Start(t)
	store := idempotencystore.New(srv.Client(), fmt.Sprintf("r29-%d:", time.Now().UnixNano()))
	const fo, st = 500 * time.Millisecond, 100 * time.Millisecond
	g := idempotency.NewGuard(store, idempotency.FailOpenAfter(fo), idempotency.StoreTimeout(st), idempotency.Lease(2*time.Second))
	ctx := context.Background()
	c, _, err := g.Begin(ctx, "s", "warm", "fp")
	require.NoError(t, err)
	require.NoError(t, c.Complete(ctx, idempotency.Record{Status: 200}))

	srv.Freeze()
	frozen := time.Now()
	_, _, err = g.Begin(ctx, "s", "K", "fp")
	require.Error(t, err, "the first request finds the freeze")
	var lastRefused time.Duration
	for i := 0; time.Since(frozen) < 2500*time.Millisecond; i++ {
		c, _, err := g.Begin(ctx, "s", fmt.Sprintf("f%d", i), "fp")
		if err != nil {
			lastRefused = time.Since(frozen)
		} else {
			require.NoError(t, c.Complete(ctx, idempotency.Record{Status: 201}))
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("last refused %v after the freeze", lastRefused)
	assert.Less(t, lastRefused, fo+3*st, "refused after FailOpenAfter + StoreTimeout")
	// K retried during fail-open: runs locally
	cK, rec, err := g.Begin(ctx, "s", "K", "fp")
	require.NoError(t, err)
	require.Nil(t, rec)
	require.NoError(t, cK.Complete(ctx, idempotency.Record{Status: 201, Body: []byte("k")}))

	srv.Thaw()
	time.Sleep(1100 * time.Millisecond)
	outcomes := []string{}
	for i := 0; i < 30; i++ {
		c, rec, err := g.Begin(ctx, "s", "K", "fp")
		switch {
		case err != nil:
			outcomes = append(outcomes, "err:"+err.Error())
		case rec != nil:
			outcomes = append(outcomes, "replay")
		default:
			outcomes = append(outcomes, "RAN AGAIN")
			_ = c.Release(ctx)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("K after the thaw, every 100 ms: %v", outcomes)
	for _, o := range outcomes {
		assert.Equal(t, "replay", o)
	}
}
