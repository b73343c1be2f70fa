package breakerstore_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/redis/breakerstore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
)

func count91(t *testing.T, c *redis.Client, pattern string) (n int, ttlMax time.Duration, bytes int64) {
	ctx := context.Background()
	iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
	for iter.Next(ctx) {
		n++
		if d := c.PTTL(ctx, iter.Val()).Val(); d > ttlMax {
			ttlMax = d
		}
		if n <= 50 {
			bytes += c.MemoryUsage(ctx, iter.Val()).Val()
		}
	}
	return n, ttlMax, bytes
}

// TestReview91BatchKeysGrowWithWindow: every flush with counts leaves a
// batch key for the whole window: the store's memory grows with
// replicas x flushes per window x breakers.
func TestReview91BatchKeysGrowWithWindow(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client()
	st := breakerstore.New(srv.Client(), "k91:")
	const flush = 10 * time.Millisecond
	b := breaker.New("batches", breaker.Shared(st), breaker.FailureRate(0.5, 10),
		breaker.Window(10*time.Minute, 10), breaker.FlushInterval(flush))
	t.Cleanup(func() { _ = b.Close() })
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		_ = b.Execute(context.Background(), func(context.Context) error { return nil })
		time.Sleep(200 * time.Microsecond)
	}
	n, ttl, bytes := count91(t, admin, "k91:*:batch:*")
	t.Logf("batch keys after 3 s of busy traffic, flush %v, window 10m: %d keys, max TTL %v, ~%d bytes each (MEMORY USAGE)", flush, n, ttl.Round(time.Second), bytes/int64(max(min(n, 50), 1)))
	if seqs, _, _ := count91(t, admin, "k91:*:seq:*"); seqs != 1 {
		t.Errorf("%d keys of batch numbers for one replica, want 1", seqs)
	}
	if n > 0 {
		t.Errorf("store memory: %d batch keys kept for %v from one replica in 3 s (one per flush for the whole window): at FlushInterval 100ms, Window 10m, that is 6000 keys per busy replica per breaker", n, ttl.Round(time.Second))
	}
}

// TestReview91OkKeysLingerADay: with HalfOpenRequests > 1 and a flapping
// dependency, each half-open generation with a success leaves an ok:<gen>
// key for a day.
func TestReview91OkKeysLingerADay(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client()
	st := breakerstore.New(srv.Client(), "o91:")
	var bs []*breaker.Breaker
	for range 3 {
		b := breaker.New("flap", breaker.Shared(st), breaker.FailureRate(0.5, 5), breaker.ConsecutiveFailures(0),
			breaker.HalfOpenRequests(3), breaker.OpenTimeout(30*time.Millisecond), breaker.FlushInterval(10*time.Millisecond))
		bs = append(bs, b)
		t.Cleanup(func() { _ = b.Close() })
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	for _, b := range bs {
		wg.Go(func() {
			for !stop.Load() {
				_ = b.Execute(context.Background(), func(context.Context) error {
					if rand.IntN(2) == 0 {
						return errors.New("flap")
					}
					return nil
				})
				time.Sleep(500 * time.Microsecond)
			}
		})
	}
	time.Sleep(4 * time.Second)
	stop.Store(true)
	wg.Wait()
	n, ttl, _ := count91(t, admin, "o91:*:ok:*")
	g, _, _ := count91(t, admin, "o91:*:grants:*")
	e, _, _ := count91(t, admin, "o91:*:eager:*")
	t.Logf("after 4 s of flapping: ok keys %d (max TTL %v), grants keys %d, eager keys %d", n, ttl.Round(time.Minute), g, e)
	if n > 1 {
		t.Errorf("ok:<generation> keys pile up: %d in 4 s, each kept %v", n, ttl.Round(time.Minute))
	}
}
