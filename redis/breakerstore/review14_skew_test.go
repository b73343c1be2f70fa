package breakerstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/redis/breakerstore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
)

// A replica whose clock is 60 s ahead forced the fleet open (its Force,
// made here directly with its At). Later, an operator on replica B, cut
// off from Redis, sets Normal: B's flusher writes it again once Redis is
// back -- unless the store holds a mode "set later" by Forcing.At, which
// the skewed clock makes alice's. Do the other replicas get bob's Normal?
func TestReview14ResendLosesToASkewedClock(t *testing.T) {
	srv := redistest.Start(t)
	px := redistest.NewProxy(t, srv.Addr())
	name := "skew-" + time.Now().Format("150405.000")
	mk := func(addr string) *breaker.Breaker {
		c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = c.Close() })
		b := breaker.New(name, breaker.Shared(breakerstore.New(c, "test:")), breaker.FlushInterval(flush), breaker.FailureRate(0.5, 10), breaker.Window(10*time.Second, 10))
		t.Cleanup(func() { _ = b.Close() })
		return b
	}
	b, c := mk(px.Addr()), mk(srv.Addr())
	direct := breakerstore.New(srv.Client(), "test:")
	alice := breaker.Forcing{Mode: breaker.ForcedOpen, By: "alice", At: time.UnixMilli(time.Now().Add(60 * time.Second).UnixMilli())}
	require.NoError(t, direct.Force(context.Background(), name, alice, 0))
	require.Eventually(t, func() bool {
		return b.Mode().Mode == breaker.ForcedOpen && c.Mode().Mode == breaker.ForcedOpen
	}, 10*flush, 10*time.Millisecond)

	px.Cut()
	time.Sleep(2 * flush)
	err := b.SetMode(context.Background(), breaker.Normal, "bob")
	t.Logf("SetMode while cut off: %v", err)
	px.Heal()
	time.Sleep(10 * flush)
	f, v, err := direct.Forced(context.Background(), name)
	require.NoError(t, err)
	t.Logf("store: %+v v=%d; b: %v; c: %v", f, v, b.Mode().Mode, c.Mode().Mode)
	assert.Equal(t, breaker.Normal, c.Mode().Mode, "bob's later Normal reaches the fleet")
	assert.NoError(t, c.Execute(context.Background(), func(context.Context) error { return nil }))
}
