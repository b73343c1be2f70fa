package breakerstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/redis/breakerstore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
)

// A breaker per key (a Group keyed by host, say) leaves keys in Redis for
// every name it ever used: each key is to expire once nobody flushes the
// name any more (the open state itself lasts a day at most, if nobody
// asks). The generation key is SET without an expiry: one key for ever per
// name ever shared.
func TestReview111EveryKeyOfABreakerExpires(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	store := breakerstore.New(c, "r111keys:")
	for _, name := range []string{"host-a", "host-b", "host-c"} {
		b := breaker.New(name, breaker.Shared(store), breaker.FailureRate(0.5, 10), breaker.FlushInterval(20*time.Millisecond))
		_ = b.Execute(context.Background(), func(context.Context) error { return nil })
		time.Sleep(60 * time.Millisecond)
		_ = b.Close()
	}
	ctx := context.Background()
	keys, err := c.Keys(ctx, "r111keys:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) == 0 {
		t.Fatal("no keys")
	}
	for _, k := range keys {
		ttl, err := c.PTTL(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if ttl < 0 || ttl > 25*time.Hour {
			t.Errorf("key %q never expires (PTTL %v): left in Redis for every breaker name ever used", k, ttl)
		}
	}
}
