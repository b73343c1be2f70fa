package breakerstore_test

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/resiliencekit/resiliencekit/redis/redistest"
)

// review22Redis is a redis-server of the test's own (redistest), started
// empty and without persistence, to kill -9 and restart on its port.
type review22Redis struct {
	t testing.TB
	s *redistest.Server
}

func startReview22Redis(t testing.TB) *review22Redis {
	t.Helper()
	return &review22Redis{t: t, s: redistest.Start(t)}
}

func (r *review22Redis) addr() string { return r.s.Addr() }

// kill9 kills the server with SIGKILL, as a crash would.
func (r *review22Redis) kill9() { r.s.Kill() }

// restart kills the server and starts it again, empty.
func (r *review22Redis) restart() {
	r.s.Kill()
	r.s.Restart()
}

func (r *review22Redis) client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: r.addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	r.t.Cleanup(func() { _ = c.Close() })
	return c
}
