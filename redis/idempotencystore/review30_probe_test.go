package idempotencystore_test

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/redis/idempotencystore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
)

// r30Open returns a guard on a real Redis behind a proxy, failed open by a
// cut (FailOpenAfter 0), the cut healed, and its next request's turn to
// probe.
func r30Open(t *testing.T) (*idempotency.Guard, *redistest.Proxy) {
	srv := redistest.Start(t)
	p := redistest.NewProxy(t, srv.Addr())
	c := goredis.NewClient(&goredis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	g := idempotency.NewGuard(idempotencystore.New(c, "r30:"), idempotency.StoreTimeout(300*time.Millisecond),
		idempotency.Lease(3*time.Second), idempotency.FailOpenAfter(0), idempotency.WithLogger(slog.New(slog.DiscardHandler)))
	// warm the connection and the eviction check
	cl, _, err := g.Begin(context.Background(), "s", "warm", "fp")
	require.NoError(t, err)
	require.NoError(t, cl.Complete(context.Background(), idempotency.Record{Status: 200}))
	p.Cut()
	cl, _, err = g.Begin(context.Background(), "s", "local", "fp")
	require.NoError(t, err, "runs on the local records")
	require.NoError(t, cl.Complete(context.Background(), idempotency.Record{Status: 200}))
	p.Heal()
	time.Sleep(1100 * time.Millisecond) // the next request probes
	return g, p
}

func r30Run(g *idempotency.Guard, key string, runs *atomic.Int64, hold time.Duration) error {
	c, rec, err := g.Begin(context.Background(), "s", key, "fp")
	if err != nil || rec != nil {
		return err
	}
	runs.Add(1)
	time.Sleep(hold)
	return c.Complete(context.Background(), idempotency.Record{Status: 201, Body: []byte("ok")})
}

// Real Redis, slow (100 ms each way) after a partition: the probing request
// claims K on Redis while a repeat of K on the same process claims it on
// the local records. Both run.
func TestReview30RedisProbeAndLocalRepeatBothRun(t *testing.T) {
	g, p := r30Open(t)
	p.Delay(50 * time.Millisecond)
	var runs atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, 2)
	wg.Go(func() { errs[0] = r30Run(g, "K", &runs, 500*time.Millisecond) })
	time.Sleep(20 * time.Millisecond)
	wg.Go(func() { errs[1] = r30Run(g, "K", &runs, 500*time.Millisecond) })
	wg.Wait()
	t.Logf("errors %v", errs)
	assert.EqualValues(t, 1, runs.Load(), "one key ran twice on one process")
}

// Real Redis back after a partition: the probing request runs K on Redis
// and saves it there; a retry of K on the same process a moment later runs
// again (on the local records), though Redis holds the result.
func TestReview30RedisKeyRunOnStoreRunsAgain(t *testing.T) {
	g, _ := r30Open(t)
	var runs atomic.Int64
	require.NoError(t, r30Run(g, "K", &runs, 0))
	require.NoError(t, r30Run(g, "K", &runs, 0))
	assert.EqualValues(t, 1, runs.Load(), "a retry on the same process ran again")
}
