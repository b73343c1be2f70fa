package breakerstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/redis/breakerstore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
)

// docs/shared-breaker.md: every key of a breaker expires a day after its
// last flush, its generation's too, but for the fleet-wide mode's two
// (:force and :forcev), kept until changed: a forced mode lasts until
// someone changes it, and its version orders the writes. A breaker whose
// mode was set fleet-wide (even back to Normal) leaves those two alone.
func TestReview112EveryKeyExpiresEvenAfterSetMode(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	ctx := context.Background()
	b := breaker.New("gone", breaker.FailureRate(0.5, 10), breaker.Window(10*time.Second, 10),
		breaker.Shared(breakerstore.New(c, "r112k:")), breaker.FlushInterval(50*time.Millisecond))
	if err := b.SetMode(ctx, breaker.ForcedOpen, "op"); err != nil {
		t.Fatal(err)
	}
	if err := b.SetMode(ctx, breaker.Normal, "op"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(150 * time.Millisecond)
	_ = b.Close()
	keys, err := c.Keys(ctx, "r112k:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if strings.HasSuffix(k, ":force") || strings.HasSuffix(k, ":forcev") {
			continue
		}
		ttl, err := c.PTTL(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if ttl == -2 { // go-redis's word for a key gone since KEYS: the restore marker lives 3 flush intervals
			continue
		}
		if ttl < 0 || ttl > 24*time.Hour {
			t.Errorf("key %q never expires (PTTL %v): the name leaves it behind for ever", k, ttl)
		}
	}
}

// With the longest flush interval (a day), the keys outlive three
// intervals: kept a day alone, each flush would find the last one's
// generation gone, and start a new one that drops its own counts.
func TestKeysOutliveThreeFlushIntervals(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	ctx := context.Background()
	b := breaker.New("daily", breaker.FailureRate(0.5, 10), breaker.Window(10*time.Second, 10),
		breaker.Shared(breakerstore.New(c, "daily:")), breaker.FlushInterval(breaker.MaxFlushInterval))
	_ = b.Execute(ctx, func(context.Context) error { return nil })
	_ = b.Close() // its last flush
	ttl, err := c.PTTL(ctx, "daily:{daily}:gen").Result()
	if err != nil {
		t.Fatal(err)
	}
	if ttl < 3*breaker.MaxFlushInterval-time.Minute {
		t.Errorf("the generation key expires in %v, under three flush intervals of %v", ttl, breaker.MaxFlushInterval)
	}
}
