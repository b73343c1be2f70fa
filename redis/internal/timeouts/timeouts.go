// Package timeouts checks that a go-redis client honours the deadlines of
// the contexts it is given: without ContextTimeoutEnabled, go-redis waits
// for its own read and pool timeouts instead (10 s seen against a frozen
// server), and no store's time bound would hold.
package timeouts

import (
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Check panics, naming who, unless c is a client whose options enable
// ContextTimeoutEnabled. A client of another type is taken as it is.
func Check(who string, c redis.UniversalClient) {
	enabled := true
	switch c := c.(type) {
	case *redis.Client:
		enabled = c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		enabled = c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		enabled = c.Options().ContextTimeoutEnabled
	}
	if !enabled {
		panic(fmt.Sprintf("%s: the go-redis client must have ContextTimeoutEnabled: true, or no call is bounded by its context's deadline", who))
	}
}
