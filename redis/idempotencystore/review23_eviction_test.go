package idempotencystore_test

// Review 23: the eviction check (3543c0a). Attack: a Redis Cluster whose
// masters do not all run with the same policy.

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/redis/idempotencystore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
)

// New's doc: "while the server evicts, Begin fails with
// ErrEvictionPolicy ... rather than run unprotected", and the store works
// on a cluster client. The check reads CONFIG GET from one node, whichever
// the client sends a keyless command to, and trusts it for a minute for
// every key: a claim whose master evicts is taken when the check asked
// another master. One master of three evicts (a node restarted with the
// wrong config, a resharding to a node set up apart): of 12 fresh stores
// (12 replicas), each claiming a key of that master, every Begin must
// fail.
func TestReview23ClusterCheckAsksAnotherMaster(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	ctx := context.Background()
	key := "review23-key"
	evicting := cl.MasterOf("idempotency:" + key)
	ec := evicting.Client()
	require.NoError(t, ec.ConfigSet(ctx, "maxmemory", "100mb").Err())
	require.NoError(t, ec.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err())

	var taken, refused int
	for i := range 12 {
		c := cl.Client()
		s := idempotencystore.New(c, "")
		rec, err := s.Begin(ctx, key, idempotency.Record{Fingerprint: "f", Token: fmt.Sprint(i)}, time.Second)
		switch {
		case errors.Is(err, idempotencystore.ErrEvictionPolicy):
			refused++
		case err == nil && rec == nil:
			taken++
			require.NoError(t, s.Release(ctx, key, idempotency.Record{Fingerprint: "f", Token: fmt.Sprint(i)}))
		default:
			t.Logf("Begin: %v %v", rec, err)
		}
	}
	t.Logf("claims on a master that evicts: %d taken, %d refused of 12", taken, refused)
	assert.Zero(t, taken, "a claim on a master that evicts must be refused")
}
