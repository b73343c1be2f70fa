package breakerstore_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/redis/breakerstore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
	"github.com/resiliencekit/resiliencekit/resilience"
)

type countStore52 struct {
	*breakerstore.Store
	mu sync.Mutex
	at []time.Time
}

func (c *countStore52) Sync(ctx context.Context, name string, s breaker.Sync) (breaker.Fleet, error) {
	c.mu.Lock()
	c.at = append(c.at, time.Now())
	c.mu.Unlock()
	return c.Store.Sync(ctx, name, s)
}

var errDown52 = errors.New("down")

// Two replicas on real Redis, calls rarer than flushes (2.5 and 4
// intervals apart, alternating replicas): the fleet closes after the
// outage; flush rate within one per interval plus one per two.
func TestReview52_RedisRareCallsClose(t *testing.T) {
	srv := redistest.Start(t)
	const every = 50 * time.Millisecond
	for _, gap := range []time.Duration{125 * time.Millisecond, 200 * time.Millisecond} {
		t.Run(gap.String(), func(t *testing.T) {
			name := "rare52-" + gap.String()
			var stores [2]*countStore52
			var bs [2]*breaker.Breaker
			for i := range bs {
				stores[i] = &countStore52{Store: breakerstore.New(srv.Client(), "r52")}
				bs[i] = breaker.New(name, breaker.Shared(stores[i]), breaker.FlushInterval(every),
					breaker.FailureRate(0.5, 5), breaker.ConsecutiveFailures(1000),
					breaker.OpenTimeout(500*time.Millisecond), breaker.HalfOpenRequests(2))
				defer bs[i].Close()
			}
			for range 20 {
				_ = bs[0].Execute(context.Background(), func(context.Context) error { return errDown52 })
			}
			deadline := time.Now().Add(3 * time.Second)
			for bs[0].FleetState() != resilience.StateOpen && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if bs[0].FleetState() != resilience.StateOpen {
				t.Fatalf("not open")
			}
			start := time.Now()
			admitted := 0
			var maxWait time.Duration
			for i := 0; i < 60; i++ {
				time.Sleep(gap)
				t0 := time.Now()
				err := bs[i%2].Execute(context.Background(), func(context.Context) error { return nil })
				if err == nil {
					admitted++
				} else if d := time.Since(t0); d > maxWait {
					maxWait = d
				}
				if bs[0].FleetState() == resilience.StateClosed && bs[1].FleetState() == resilience.StateClosed {
					break
				}
			}
			el := time.Since(start)
			t.Logf("closed after %v, admitted %d, longest rejection %v", el, admitted, maxWait)
			if bs[0].FleetState() != resilience.StateClosed {
				t.Errorf("fleet not closed: %v", bs[0].FleetState())
			}
			if maxWait > 2*every+20*time.Millisecond {
				t.Errorf("a rejected call waited %v", maxWait)
			}
			for i, s := range stores {
				s.mu.Lock()
				n := 0
				for _, a := range s.at {
					if !a.Before(start) {
						n++
					}
				}
				s.mu.Unlock()
				allowed := int(el/every) + 1 + int(el/(2*every)) + 1
				t.Logf("replica %d: %d syncs in %v (allowed %d)", i, n, el, allowed)
				if n > allowed {
					t.Errorf("replica %d: %d syncs, allowed %d", i, n, allowed)
				}
			}
		})
	}
}

// A frozen Redis while a rare call asks at once: bounded by two intervals.
func TestReview52_RedisFrozenRare(t *testing.T) {
	srv := redistest.Start(t)
	const every = 50 * time.Millisecond
	b := breaker.New("frozen52", breaker.Shared(breakerstore.New(srv.Client(), "f52")), breaker.FlushInterval(every),
		breaker.FailureRate(0.5, 5), breaker.ConsecutiveFailures(1000),
		breaker.OpenTimeout(300*time.Millisecond), breaker.HalfOpenRequests(1))
	for range 20 {
		_ = b.Execute(context.Background(), func(context.Context) error { return errDown52 })
	}
	deadline := time.Now().Add(3 * time.Second)
	for b.FleetState() != resilience.StateOpen && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(600 * time.Millisecond)
	srv.Freeze()
	defer srv.Thaw()
	t0 := time.Now()
	err := b.Execute(context.Background(), func(context.Context) error { return nil })
	d := time.Since(t0)
	t.Logf("state %v, err %v after %v", b.FleetState(), err, d)
	if d > 2*every+30*time.Millisecond {
		t.Errorf("rare call waited %v on a frozen store", d)
	}
	t1 := time.Now()
	b.Close()
	if c := time.Since(t1); c > 2*every+30*time.Millisecond {
		t.Errorf("Close took %v", c)
	}
}
