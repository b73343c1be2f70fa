package breakerstore_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/redis/breakerstore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// Previous on a real Redis: given in a flush's answer for the change that
// began the current generation, to any replica; not once the generation
// changed again; 0 after a restart (run_id changed) though the state was
// kept; Watch says no Previous.
func TestReview157PreviousRealRedis(t *testing.T) {
	srv := redistest.Start(t, "--appendonly", "yes", "--appendfsync", "always")
	c := srv.Client()
	st := breakerstore.New(c, "r157")
	pol := breaker.FleetPolicy{Rate: 0.5, MinRequests: 2, Window: 10 * time.Second, Buckets: 10,
		OpenTimeout: 200 * time.Millisecond, HalfOpenRequests: 1, ProbeTimeout: 600 * time.Millisecond, FlushInterval: 100 * time.Millisecond}
	ctx := context.Background()
	var mu sync.Mutex
	var heard []breaker.Fleet
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go st.Watch(wctx, "dep", func(f breaker.Fleet) { mu.Lock(); heard = append(heard, f); mu.Unlock() })
	time.Sleep(200 * time.Millisecond)

	do := func(s breaker.Sync) breaker.Fleet {
		t.Helper()
		s.Policy = pol
		if s.Replica == "" {
			s.Replica = "a"
		}
		f, err := st.Sync(ctx, "dep", s)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	g0 := do(breaker.Sync{GenerationUnknown: true})
	op := do(breaker.Sync{Batch: "a-1", Requests: 4, Failures: 4, Generation: g0.Generation})
	if op.State != resilience.StateOpen || op.Previous != g0.Generation {
		t.Fatalf("opening: %+v, want open with Previous %d", op, g0.Generation)
	}
	time.Sleep(250 * time.Millisecond)
	h := do(breaker.Sync{Generation: op.Generation, State: resilience.StateOpen, OpenedFor: 250 * time.Millisecond, WantProbe: true})
	if h.State != resilience.StateHalfOpen || !h.ProbeGranted {
		t.Fatalf("half-open: %+v", h)
	}
	if h.Previous != g0.Generation {
		t.Errorf("half-open answer Previous %d, want %d (the generation the opening ended)", h.Previous, g0.Generation)
	}
	cl := do(breaker.Sync{Batch: "a-2", ProbeSuccesses: 1, Generation: op.Generation, State: resilience.StateHalfOpen, OpenedFor: 300 * time.Millisecond, ProbeRunning: false})
	if cl.State != resilience.StateClosed || cl.Previous != op.Generation {
		t.Fatalf("closing: %+v, want closed with Previous %d", cl, op.Generation)
	}
	other := do(breaker.Sync{Replica: "b", Generation: op.Generation, State: resilience.StateHalfOpen, OpenedFor: 300 * time.Millisecond})
	if other.Generation != cl.Generation || other.Previous != op.Generation {
		t.Errorf("another replica's answer: %+v, want gen %d Previous %d", other, cl.Generation, op.Generation)
	}
	time.Sleep(100 * time.Millisecond)
	mu.Lock()
	for _, f := range heard {
		if f.Previous != 0 || f.ProbeGranted {
			t.Errorf("Watch said %+v: no Previous expected", f)
		}
	}
	if len(heard) != 2 {
		t.Errorf("Watch heard %d changes, want 2: %+v", len(heard), heard)
	}
	mu.Unlock()
	cancel()

	srv.Kill()
	srv.Restart()
	var after breaker.Fleet
	for i := range 50 {
		f, err := st.Sync(ctx, "dep", breaker.Sync{Replica: "a", Generation: cl.Generation, Policy: pol})
		if err == nil {
			after = f
			break
		}
		if i == 49 {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if after.Generation == cl.Generation && after.Previous != 0 {
		t.Errorf("after a restart that kept generation %d: Previous %d, want 0", cl.Generation, after.Previous)
	}
	t.Logf("after restart: %+v (closed gen was %d)", after, cl.Generation)
}
