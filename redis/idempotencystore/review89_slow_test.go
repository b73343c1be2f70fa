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

func review89_store(t *testing.T, addr string) *idempotencystore.Store {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	return idempotencystore.New(c, "r89:")
}

func review89_begin(s *idempotencystore.Store, d time.Duration, key string) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	start := time.Now()
	_, err := s.Begin(ctx, key, idempotency.Record{Token: "t-" + key}, time.Minute)
	return time.Since(start), err
}

// A new process's first claim on an evicting server, through a link whose
// round trip is 600 ms, with a StoreTimeout of 5 s (over 8 round trips):
// it must get ErrEvictionPolicy, not claim unprotected.
func TestReview89_FirstClaimOnEvictingServerSlowLink(t *testing.T) {
	srv := redistest.Start(t, "--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru")
	p := redistest.NewProxy(t, srv.Addr())
	p.Delay(300 * time.Millisecond)
	s := review89_store(t, p.Addr())
	took, err := review89_begin(s, 5*time.Second, "first")
	t.Logf("first claim: %v after %v", err, took)
	if !errors.Is(err, idempotencystore.ErrEvictionPolicy) {
		t.Errorf("first claim on an evicting server: err = %v, want ErrEvictionPolicy (claimed unprotected if nil)", err)
	}
	took, err = review89_begin(s, 5*time.Second, "second")
	t.Logf("second claim: %v after %v", err, took)
	time.Sleep(2500 * time.Millisecond) // let background work end (goleak)
}

// With StoreTimeout four round trips of the link, as New's doc asks, a
// round trip of 600 ms (StoreTimeout 2.4 s): the claims after the first
// must be shared.
func TestReview89_FourRoundTripsLongLink(t *testing.T) {
	srv := redistest.Start(t)
	p := redistest.NewProxy(t, srv.Addr())
	p.Delay(300 * time.Millisecond)
	s := review89_store(t, p.Addr())
	ok := 0
	for i := range 5 {
		took, err := review89_begin(s, 2400*time.Millisecond, fmt.Sprint("k", i))
		t.Logf("claim %d: %v after %v", i, err, took)
		if err == nil {
			ok++
		}
		time.Sleep(100 * time.Millisecond)
	}
	if ok < 4 {
		t.Errorf("%d of 5 claims shared with StoreTimeout = 4 round trips (600 ms each), want 4 at least", ok)
	}
	time.Sleep(2500 * time.Millisecond)
}
