package idempotencystore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/redis/idempotencystore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
)

// New takes any redis.UniversalClient with ContextTimeoutEnabled, and
// checks a *redis.Ring's options as it does a Client's: a Ring is
// accepted. A Ring shards keys over independent servers by a hash of the
// key, and takes a shard that fails its heartbeats out of the ring,
// rehashing its keys onto the others.

func r165Ring(t testing.TB, hb time.Duration, addrs map[string]string) *redis.Ring {
	r := redis.NewRing(&redis.RingOptions{Addrs: addrs, ContextTimeoutEnabled: true, HeartbeatFrequency: hb})
	t.Cleanup(func() { _ = r.Close() })
	return r
}

// r165KeyOn returns a key of the guard's (scope "s") that the ring r
// places on the server of direct.
func r165KeyOn(t *testing.T, r *redis.Ring, direct *redis.Client, prefix string, scoped bool) string {
	ctx := t.Context()
	for i := range 1000 {
		k := fmt.Sprintf("k%d", i)
		rk := prefix + k
		if scoped {
			rk = r165Key(prefix, "s", k)
		}
		if err := r.Set(ctx, rk, "x", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		n, _ := direct.Exists(ctx, rk).Result()
		_ = r.Del(ctx, rk).Err()
		if n == 1 {
			return k
		}
	}
	t.Fatal("no key found on the shard")
	return ""
}

// "While the server evicts, Begin fails with ErrEvictionPolicy": the
// check reads CONFIG GET, a keyless command, which a Ring sends to a
// random shard, and keeps the answer for a minute for all keys (its cache
// is by address, "" for anything but a ClusterClient). A claim on a
// shard that evicts is then taken whenever the read hit another shard.
func TestReview165RingEvictingShardIsNotRefused(t *testing.T) {
	a := redistest.Start(t)
	b := redistest.Start(t, "--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru")
	r := r165Ring(t, 500*time.Millisecond, map[string]string{"a": a.Addr(), "b": b.Addr()})
	key := r165KeyOn(t, r, r165Client(t, b.Addr()), "idempotency:", false)
	const tries = 12
	accepted := 0
	for i := range tries {
		s := idempotencystore.New(r, "") // a fresh store: a fresh policy read
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		claim := idempotency.Record{Fingerprint: "f", Token: fmt.Sprint("t", i)}
		found, err := s.Begin(ctx, key, claim, 2*time.Second)
		switch {
		case err == nil && found == nil:
			accepted++
			_ = s.Release(ctx, key, claim)
		case errors.Is(err, idempotencystore.ErrEvictionPolicy):
		default:
			t.Logf("try %d: found %v err %v", i, found, err)
		}
		cancel()
	}
	if accepted > 0 {
		t.Errorf("%d of %d stores on a Ring took a claim on a shard that evicts (allkeys-lru, maxmemory 100mb): the policy read went to the other shard", accepted, tries)
	}
}

// docs: Redis with AOF, "store restart, shorter than the exact condition:
// claims and records survive: once", and while it is down a repeat on
// another replica gets 503. On a Ring the shard that is down is taken out
// after three failed heartbeats and its keys rehash onto the other shard,
// where the key is free: a repeat on another replica runs the request
// again while its first run holds the key on the shard that is down.
func TestReview165RingShardDownRunsAKeyTwice(t *testing.T) {
	aof := []string{"--appendonly", "yes", "--appendfsync", "always"}
	x := redistest.Start(t, aof...)
	y := redistest.Start(t, aof...)
	addrs := map[string]string{"x": x.Addr(), "y": y.Addr()}
	ra, rb := r165Ring(t, 0, addrs), r165Ring(t, 0, addrs) // go-redis's default heartbeat, 500 ms
	key := r165KeyOn(t, ra, r165Client(t, x.Addr()), "idempotency:", true)
	opts := []idempotency.Option{idempotency.Lease(9 * time.Second), idempotency.StoreTimeout(200 * time.Millisecond), idempotency.FailOpenAfter(-1)}
	ga := idempotency.NewGuard(idempotencystore.New(ra, ""), opts...)
	gb := idempotency.NewGuard(idempotencystore.New(rb, ""), opts...)

	first, _, err := ga.Begin(t.Context(), "s", key, "fp")
	if first == nil || err != nil {
		t.Fatalf("first Begin: %v %v", first, err)
	}
	defer first.Release(context.Background())
	x.Kill()
	var second *idempotency.Claim
	var errs []error
	killed := time.Now()
	deadline := killed.Add(4500 * time.Millisecond) // x back after 4.5 s, within the 9 s lease (renewals every 3 s)
	for time.Now().Before(deadline) && second == nil {
		c, _, err := gb.Begin(t.Context(), "s", key, "fp")
		if c != nil {
			second = c
			t.Logf("the repeat claimed the key %v after the kill", time.Since(killed))
			break
		}
		errs = append(errs, fmt.Errorf("%v: %w", time.Since(killed).Round(time.Millisecond), err))
		time.Sleep(100 * time.Millisecond)
	}
	x.Restart()
	t.Logf("refusals: %v", errs)
	if second != nil {
		defer second.Release(context.Background())
		t.Errorf("a repeat on another replica ran while the first run held the key on a shard down for less than the lease (after %d refusals: %v): two runs", len(errs), errs[len(errs)-min(len(errs), 2):])
	}
}
