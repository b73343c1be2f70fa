package idempotencystore_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"

	"github.com/resiliencekit/resiliencekit/redis/idempotencystore"
)

// TestReview165RingIsRefused: a Ring shards keys over independent servers
// and takes a shard that fails its heartbeats out of the ring, rehashing
// its keys onto the others. Review165 saw a repeat claim a key 2 s after
// its shard was killed, while the first request's 9 s lease ran, and
// the request run twice; and the eviction check, a keyless CONFIG GET,
// read a random shard's policy. New refuses a Ring.
func TestReview165RingIsRefused(t *testing.T) {
	r := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}, ContextTimeoutEnabled: true, HeartbeatFrequency: time.Hour})
	defer r.Close()
	assert.PanicsWithValue(t, "idempotencystore.New: a *redis.Ring: the store takes a *redis.Client (redis.NewFailoverClient for Sentinel) or a *redis.ClusterClient, whose timeouts and key placement it knows; a Ring moves a failed shard's keys where its claims are not, and requests would run twice",
		func() { idempotencystore.New(r, "") })
}
