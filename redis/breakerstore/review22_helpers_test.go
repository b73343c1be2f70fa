package breakerstore_test

import (
	"crypto/rand"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/redis/breakerstore"
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

// fleet starts three replicas of a breaker of its own name, shared on r,
// flushing every 20 ms, that open at half of 5 calls failed.
func (r *review22Redis) fleet(prefix string, openTimeout time.Duration) []*breaker.Breaker {
	name := prefix + rand.Text()[:8]
	var bs []*breaker.Breaker
	for range 3 {
		bs = append(bs, breaker.New(name,
			breaker.FailureRate(0.5, 5), breaker.Window(10*time.Second, 10), breaker.ConsecutiveFailures(0),
			breaker.OpenTimeout(openTimeout),
			breaker.Shared(breakerstore.New(r.client(), "")), breaker.FlushInterval(20*time.Millisecond)))
	}
	return bs
}
