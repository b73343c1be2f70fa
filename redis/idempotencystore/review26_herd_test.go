package idempotencystore_test

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/redis/idempotencystore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
)

func r26ConfigCalls(t *testing.T, c *redis.Client) int {
	info, err := c.Info(context.Background(), "commandstats").Result()
	require.NoError(t, err)
	m := regexp.MustCompile(`cmdstat_config\|get:calls=(\d+)`).FindStringSubmatch(info)
	if m == nil {
		m = regexp.MustCompile(`cmdstat_config:calls=(\d+)`).FindStringSubmatch(info)
	}
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// New: "The store checks it by CONFIG GET maxmemory and maxmemory-policy on
// its first Begin and again at most once a minute". A herd of Begins that
// arrives while the server is frozen (a pause, a failover) and finds it
// recovering: how many CONFIG GETs does it send, and do all claims get
// through once the server answers, as a plain SET NX would?
func TestReview26_HerdOfConfigGetsOnRecoveringServer(t *testing.T) {
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true, PoolSize: 32})
	defer c.Close()
	require.NoError(t, c.Ping(context.Background()).Err())
	admin := srv.Client()
	before := r26ConfigCalls(t, admin)

	s := idempotencystore.New(c, "")
	srv.Freeze()
	const n = 400
	var wg sync.WaitGroup
	var failed atomic.Int32
	var firstErr atomic.Value
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			key := fmt.Sprintf("herd-%d", i)
			_, err := s.Begin(ctx, key, idempotency.Record{Fingerprint: "f", Token: key}, time.Minute)
			if err != nil {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, err)
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	srv.Thaw()
	wg.Wait()
	after := r26ConfigCalls(t, admin)
	t.Logf("CONFIG GET calls for %d Begins: %d; failed Begins: %d (%v)", n, after-before, failed.Load(), firstErr.Load())
	assert.Zero(t, failed.Load(), "Begins failed against a server that recovered well within their time")
	assert.LessOrEqual(t, after-before, 40, "a herd of CONFIG GETs: the policy read once a minute was sent by every claim")
}
