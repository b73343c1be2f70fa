package idempotencystore_test

import (
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/resiliencekit/resiliencekit/redis/idempotencystore"
)

// review168: every supported way of making a client that the docs name
// (NewClient, NewFailoverClient for Sentinel, NewClusterClient) and the
// constructors that make those types (NewUniversalClient,
// NewFailoverClusterClient) are taken by New.
func TestReview168SupportedConstructorsAreTaken(t *testing.T) {
	cases := map[string]func() redis.UniversalClient{
		"NewClient": func() redis.UniversalClient {
			return redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
		},
		"NewFailoverClient": func() redis.UniversalClient {
			return redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{"127.0.0.1:1"}, ContextTimeoutEnabled: true})
		},
		"NewFailoverClusterClient": func() redis.UniversalClient {
			return redis.NewFailoverClusterClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{"127.0.0.1:1"}, ContextTimeoutEnabled: true})
		},
		"NewClusterClient": func() redis.UniversalClient {
			return redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, ContextTimeoutEnabled: true})
		},
		"NewUniversalClient/one addr": func() redis.UniversalClient {
			return redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{"127.0.0.1:1"}, ContextTimeoutEnabled: true})
		},
		"NewUniversalClient/cluster": func() redis.UniversalClient {
			return redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{"127.0.0.1:1", "127.0.0.1:2"}, ContextTimeoutEnabled: true})
		},
		"NewUniversalClient/sentinel": func() redis.UniversalClient {
			return redis.NewUniversalClient(&redis.UniversalOptions{MasterName: "m", Addrs: []string{"127.0.0.1:1"}, ContextTimeoutEnabled: true})
		},
		"NewUniversalClient/sentinel+RouteByLatency": func() redis.UniversalClient {
			return redis.NewUniversalClient(&redis.UniversalOptions{MasterName: "m", Addrs: []string{"127.0.0.1:1"}, RouteByLatency: true, ContextTimeoutEnabled: true})
		},
	}
	for name, mk := range cases {
		t.Run(name, func(t *testing.T) {
			c := mk()
			defer c.Close()
			var p any
			func() {
				defer func() { p = recover() }()
				_ = idempotencystore.New(c, "")
			}()
			if p != nil {
				t.Fatalf("New(%T) panicked: %v", c, p)
			}
		})
	}
	_ = fmt.Sprint
}
