package breakerstore_test

import (
	"context"
	"crypto/rand"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/redis/breakerstore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
	"github.com/resiliencekit/resiliencekit/resilience"
)

var review71Boom = errors.New("boom")

func review71Pair(t *testing.T, name string, mk func() redis.UniversalClient, unavailable *atomic.Int64) (*breaker.Breaker, *breaker.Breaker) {
	var bs []*breaker.Breaker
	for range 2 {
		b := breaker.New(name,
			breaker.FailureRate(0.5, 10), breaker.Window(10*time.Second, 10), breaker.ConsecutiveFailures(0),
			breaker.OpenTimeout(5*time.Second),
			breaker.WithListener(resilience.ListenerFunc(func(e resilience.Event) {
				if e.Kind == resilience.EventSharedStateUnavailable {
					unavailable.Add(1)
					t.Logf("unavailable: %v", e.Err)
				}
			})),
			// A flush has one interval to answer: 30 ms was too short for a
			// 64 KiB name's script to a cluster under -race on a loaded
			// machine (every flush timed out, twice in CI).
			breaker.Shared(breakerstore.New(mk(), "")), breaker.FlushInterval(200*time.Millisecond))
		t.Cleanup(func() { _ = b.Close() })
		bs = append(bs, b)
	}
	return bs[0], bs[1]
}

// review71Shares: replica a fails 20 calls; replica b must hear the fleet
// open (it made no call) within 5 s.
func review71Shares(t *testing.T, a, b *breaker.Breaker) bool {
	ctx := context.Background()
	for range 20 {
		_ = a.Execute(ctx, func(context.Context) error { return review71Boom })
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if b.FleetState() == resilience.StateOpen {
			return true
		}
		time.Sleep(5 * time.Millisecond)
	}
	return false
}

func review71Names() map[string]string {
	return map[string]string{
		"empty":          "",
		"leadingBrace":   "}x" + rand.Text()[:6],
		"braces":         "a{b}c" + rand.Text()[:6],
		"colons":         "::a:b:" + rand.Text()[:6],
		"onlyClose":      "}",
		"long64k":        strings.Repeat("n", 64<<10) + rand.Text()[:6],
		"suffixLike":     rand.Text()[:6] + "}:gen",
		"unicodeNewline": "ü\n\x00" + rand.Text()[:6],
	}
}

func TestReview71HostileNamesSingleServer(t *testing.T) {
	s := redistest.Start(t)
	for what, name := range review71Names() {
		t.Run(what, func(t *testing.T) {
			var un atomic.Int64
			a, b := review71Pair(t, name, func() redis.UniversalClient {
				c := redis.NewClient(&redis.Options{Addr: s.Addr(), ContextTimeoutEnabled: true})
				t.Cleanup(func() { _ = c.Close() })
				return c
			}, &un)
			if !review71Shares(t, a, b) {
				t.Errorf("name %.40q: replica b never heard the fleet open (unavailable events %d)", name, un.Load())
			}
			_ = s.Client().FlushAll(context.Background())
		})
	}
}

func TestReview71HostileNamesCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	for what, name := range review71Names() {
		t.Run(what, func(t *testing.T) {
			var un atomic.Int64
			a, b := review71Pair(t, name, func() redis.UniversalClient {
				c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ContextTimeoutEnabled: true, ReadTimeout: 500 * time.Millisecond})
				t.Cleanup(func() { _ = c.Close() })
				return c
			}, &un)
			if !review71Shares(t, a, b) {
				t.Errorf("name %.40q: replica b never heard the fleet open (unavailable events %d)", name, un.Load())
			}
			// do no harm: calls of a healthy dependency still pass on a
			var rej int
			for range 50 {
				if err := a.Execute(context.Background(), func(context.Context) error { return nil }); breaker.IsRejection(err) && a.FleetState() != resilience.StateOpen {
					rej++
				}
			}
			if rej > 0 {
				t.Errorf("%d rejections while the fleet was not open", rej)
			}
		})
	}
}
