package idempotencystore_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/redis/idempotencystore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// r58Events counts events by kind.
type r58Events struct {
	mu sync.Mutex
	n  map[resilience.EventKind]int
}

func (e *r58Events) OnEvent(ev resilience.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.n == nil {
		e.n = map[resilience.EventKind]int{}
	}
	e.n[ev.Kind]++
}

func (e *r58Events) count(k resilience.EventKind) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n[k]
}

// r58Client returns a client of addr of its own, closed at the end.
func r58Client(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// r58Guards returns n guards (replicas), each with a client and a store of its own.
func r58Guards(t *testing.T, addr string, n int, ev *r58Events, opts ...idempotency.Option) []*idempotency.Guard {
	gs := make([]*idempotency.Guard, n)
	for i := range gs {
		o := append([]idempotency.Option{}, opts...)
		if ev != nil {
			o = append(o, idempotency.WithListener(ev))
		}
		gs[i] = idempotency.NewGuard(idempotencystore.New(r58Client(t, addr), "r58:"), o...)
	}
	return gs
}

func r58Start(t *testing.T, args ...string) *redistest.Server {
	return redistest.Start(t, args...)
}

func r58Is(err error, target error) bool { return errors.Is(err, target) }

var _ = context.Background
var _ = time.Second

// r58Serve serves h on a listener of its own; the caller shuts it down.
func r58Serve(t *testing.T, h http.Handler) (string, *http.Server) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &http.Server{Handler: h}
	go func() { _ = s.Serve(l) }()
	t.Cleanup(func() { _ = s.Close() })
	return "http://" + l.Addr().String(), s
}
