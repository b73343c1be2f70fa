package idempotencystore_test

import (
	"context"
	"log/slog"
	"strconv"
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

// A real redis-server frozen (SIGSTOP) while a request slower than its
// lease runs and other keyed requests keep coming; then thawed. The slow
// request must go on (moved to local records), fail-open must come within
// FailOpenAfter, each key run at most once on this process, and every
// key run locally replayed after the store is back.
func TestReview31_FrozenRedisSlowRequestAndStream(t *testing.T) {
	srv := redistest.Start(t)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	g := idempotency.NewGuard(idempotencystore.New(c, "r31:"), idempotency.StoreTimeout(200*time.Millisecond),
		idempotency.Lease(1500*time.Millisecond), idempotency.FailOpenAfter(500*time.Millisecond),
		idempotency.WithLogger(slog.New(slog.DiscardHandler)))

	var runs sync.Map // key -> *atomic.Int64
	run := func(key string, hold time.Duration) (ran bool, err error) {
		cl, rec, err := g.Begin(context.Background(), "s", key, "fp")
		if err != nil || rec != nil {
			return false, err
		}
		v, _ := runs.LoadOrStore(key, new(atomic.Int64))
		v.(*atomic.Int64).Add(1)
		select {
		case <-time.After(hold):
		case <-cl.Context().Done():
			_ = cl.Release(context.Background())
			return true, context.Cause(cl.Context())
		}
		return true, cl.Complete(context.Background(), idempotency.Record{Status: 201, Body: []byte(key)})
	}

	slowErr := make(chan error, 1)
	go func() { _, err := run("slow", 3500*time.Millisecond); slowErr <- err }()
	time.Sleep(200 * time.Millisecond)
	srv.Freeze()
	frozen := time.Now()
	var firstLocal time.Duration
	var ranKeys []string
	for i := 0; time.Since(frozen) < 3*time.Second; i++ {
		k := "k" + strconv.Itoa(i)
		ran, err := run(k, 10*time.Millisecond)
		if ran && err == nil {
			ranKeys = append(ranKeys, k)
			if firstLocal == 0 {
				firstLocal = time.Since(frozen)
			}
		}
		// repeats on this process while failed open: replayed, never run again
		if len(ranKeys) > 0 {
			_, _ = run(ranKeys[0], 10*time.Millisecond)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("first request run locally %v after the freeze", firstLocal)
	assert.NotZero(t, firstLocal)
	assert.Less(t, firstLocal, 500*time.Millisecond+time.Second, "refusals lasted well past FailOpenAfter (StoreTimeout per claim)")
	srv.Thaw()
	require.NoError(t, <-slowErr, "slow request canceled")
	// store back: wait for the probes, then repeats of everything run locally
	time.Sleep(4 * time.Second)
	ranKeys = append(ranKeys, "slow")
	for _, k := range ranKeys {
		ran, err := run(k, 0)
		assert.False(t, ran, "key %s run again after the store came back", k)
		assert.NoError(t, err, "key %s", k)
	}
	runs.Range(func(k, v any) bool {
		assert.EqualValues(t, 1, v.(*atomic.Int64).Load(), "key %v ran more than once on one process", k)
		return true
	})
}
