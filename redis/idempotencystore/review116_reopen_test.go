package idempotencystore_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/redis/idempotencystore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
	"github.com/resiliencekit/resiliencekit/resilience"
)

type r116Events struct{ restored, unavailable atomic.Int64 }

func (e *r116Events) OnEvent(ev resilience.Event) {
	switch ev.Kind {
	case resilience.EventSharedStateRestored:
		e.restored.Add(1)
	case resilience.EventSharedStateUnavailable:
		e.unavailable.Add(1)
	}
}

// Real Redis: a partition of 1.5 s fails the guard open (FailOpenAfter
// 1 s); healed, the outage ends on the probes. Then, Redis healthy, an
// order runs and is saved in Redis; seconds later one claim of another
// key is slow (a 150 ms latency spike over a 100 ms StoreTimeout: an RDB
// fork, a slow command). That one timeout, within a minute of the
// outage's end, fails the guard open at once, and the order's retry runs
// again on the local records though Redis holds its result.
func TestReview116RedisOneLatencySpikeAfterAnOutageRunsAStoredKeyAgain(t *testing.T) {
	srv := redistest.Start(t)
	p := redistest.NewProxy(t, srv.Addr())
	c := goredis.NewClient(&goredis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	ev := &r116Events{}
	g := idempotency.NewGuard(idempotencystore.New(c, "r116:"), idempotency.StoreTimeout(100*time.Millisecond),
		idempotency.Lease(time.Second), idempotency.FailOpenAfter(time.Second),
		idempotency.WithListener(ev), idempotency.WithLogger(slog.New(slog.DiscardHandler)))
	runs := map[string]int{}
	run := func(key string) (string, bool) {
		cl, rec, err := g.Begin(context.Background(), "s", key, "fp")
		switch {
		case err != nil:
			return err.Error(), false
		case rec != nil:
			return "replayed", false
		}
		runs[key]++
		local := cl.Local()
		require.NoError(t, cl.Complete(context.Background(), idempotency.Record{Status: 201, Body: []byte("ok")}))
		return "ran", local
	}
	run("warm")
	p.Cut()
	for i := 0; ev.unavailable.Load() == 0 && i < 60; i++ {
		run(fmt.Sprintf("down-%d", i))
		time.Sleep(50 * time.Millisecond)
	}
	require.EqualValues(t, 1, ev.unavailable.Load(), "failed open")
	p.Heal()
	for i := 0; ev.restored.Load() == 0 && i < 60; i++ {
		run(fmt.Sprintf("back-%d", i))
		time.Sleep(100 * time.Millisecond)
	}
	require.EqualValues(t, 1, ev.restored.Load(), "outage ended")
	for i := range 10 { // Redis healthy: claims on it
		_, local := run(fmt.Sprintf("healthy-%d", i))
		require.False(t, local)
		time.Sleep(50 * time.Millisecond)
	}
	got, local := run("order-1")
	require.Equal(t, "ran", got)
	require.False(t, local, "order-1 on Redis")
	time.Sleep(500 * time.Millisecond)
	p.Delay(150 * time.Millisecond)
	blip, _ := run("blip")
	p.Delay(0)
	time.Sleep(200 * time.Millisecond) // the slow answer drained
	again, _ := run("order-1")
	t.Logf("blip: %s; order-1's retry: %s; unavailable events %d", blip, again, ev.unavailable.Load())
	if runs["order-1"] != 1 {
		t.Errorf("order-1 ran %d times: one 150 ms latency spike on a healthy Redis, within a minute of an outage's end, failed the guard open", runs["order-1"])
	}
}
