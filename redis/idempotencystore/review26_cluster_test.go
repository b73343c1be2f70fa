package idempotencystore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/redis/idempotencystore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
)

// checkEviction: "On a cluster that is key's master, each read apart";
// Begin fails with ErrEvictionPolicy "while the server evicts". Many
// goroutines claim keys across a cluster one of whose masters evicts: no
// claim is taken on that master, every other claim is, with -race.
func TestReview26_ClusterHerdEvictingMaster(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	cl.WaitOK(t, 20*time.Second)
	c := cl.Client()
	s := idempotencystore.New(c, "")
	bad := cl.MasterOf("idempotency:k-0")
	require.NoError(t, bad.Client().ConfigSet(context.Background(), "maxmemory", "100mb").Err())
	require.NoError(t, bad.Client().ConfigSet(context.Background(), "maxmemory-policy", "volatile-lru").Err())
	var wg sync.WaitGroup
	var taken, refused, other atomic.Int32
	for i := range 600 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("k-%d", i)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			_, err := s.Begin(ctx, key, idempotency.Record{Fingerprint: "f", Token: key}, time.Minute)
			onBad := cl.MasterOf("idempotency:"+key).Addr() == bad.Addr()
			switch {
			case onBad && err == nil:
				taken.Add(1)
			case onBad && errors.Is(err, idempotencystore.ErrEvictionPolicy):
				refused.Add(1)
			case !onBad && err == nil:
			default:
				other.Add(1)
				t.Logf("%s (on evicting master %v): %v", key, onBad, err)
			}
		}()
	}
	wg.Wait()
	t.Logf("on the evicting master: %d taken, %d refused; %d other failures", taken.Load(), refused.Load(), other.Load())
	assert.Zero(t, taken.Load(), "claims taken on a master that evicts")
	assert.Zero(t, other.Load())
}
