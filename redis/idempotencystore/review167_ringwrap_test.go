package idempotencystore_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/resiliencekit/resiliencekit/redis/idempotencystore"
)

// r167Instrumented is what a tracing or metrics wrapper of a go-redis
// client looks like: the client embedded, a UniversalClient still.
type r167Instrumented struct{ *redis.Ring }

type r167InstrumentedUniversal struct{ redis.UniversalClient }

func r167Panics(f func()) (msg string, panicked bool) {
	defer func() {
		if r := recover(); r != nil {
			msg, panicked = fmt.Sprint(r), true
		}
	}()
	f()
	return "", false
}

// Promise (CHANGELOG review165): New panics for a *redis.Ring, whose
// rehashing of a failed shard's keys runs requests twice. A Ring behind
// an instrumentation wrapper rehashes the same way.
func TestReview167NewRefusesWrappedRing(t *testing.T) {
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1", "b": "127.0.0.1:2"}, ContextTimeoutEnabled: true})
	defer ring.Close()
	msg, ok := r167Panics(func() { idempotencystore.New(ring, "") })
	if !ok || !strings.Contains(msg, "Ring") {
		t.Fatalf("bare Ring: panicked %v %q", ok, msg)
	}
	t.Logf("the bare Ring's message: %s", msg)
	for name, c := range map[string]redis.UniversalClient{
		"struct embedding *redis.Ring":           r167Instrumented{ring},
		"struct embedding UniversalClient(Ring)": r167InstrumentedUniversal{ring},
	} {
		if _, ok := r167Panics(func() { idempotencystore.New(c, "") }); !ok {
			t.Errorf("%s: accepted; it moves a failed shard's keys as a bare Ring does", name)
		}
	}
}

// Promise (timeouts.Check): a client without ContextTimeoutEnabled is
// refused. Behind a wrapper, it is not.
func TestReview167NewRefusesWrappedClientWithoutContextTimeouts(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // ContextTimeoutEnabled false
	defer c.Close()
	if _, ok := r167Panics(func() { idempotencystore.New(c, "") }); !ok {
		t.Fatal("bare Client without ContextTimeoutEnabled accepted")
	}
	if _, ok := r167Panics(func() { idempotencystore.New(r167InstrumentedUniversal{c}, "") }); !ok {
		t.Error("a wrapped Client without ContextTimeoutEnabled is accepted: its calls are not bounded by their contexts")
	}
}
