// Package redistest gives tests a Redis server: an in-process miniredis,
// or the real redis-server named by RESILIENCEKIT_REDIS_ADDR (host:port),
// which .ci/run starts.
package redistest

import (
	"os"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// EnvAddr is the variable naming a real Redis server for tests.
const EnvAddr = "RESILIENCEKIT_REDIS_ADDR"

// Mini returns a client of a fresh miniredis and the server, both closed
// when the test ends.
func Mini(t testing.TB) (*redis.Client, *miniredis.Miniredis) {
	t.Helper()
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	return c, m
}

// Real returns a client of the real Redis server, closed when the test
// ends, or skips the test if EnvAddr is unset. Tests must use keys of
// their own: the server is shared.
func Real(t testing.TB) *redis.Client {
	t.Helper()
	addr := os.Getenv(EnvAddr)
	if addr == "" {
		t.Skipf("%s is not set: no real Redis server (.ci/run starts one)", EnvAddr)
	}
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	if err := c.Ping(t.Context()).Err(); err != nil {
		t.Fatalf("redis at %s: %v", addr, err)
	}
	return c
}
