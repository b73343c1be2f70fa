package idempotencystore_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/idempotency"
	"github.com/resiliencekit/resiliencekit/redis/idempotencystore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// r152Until sleeps off. The guard's seconds (its monotonic clock,
// internal to the core module) cannot be aligned with from this module:
// the synctest TestReview152TwoBlipsAndAQuickRetryFailAHealthyGuardOpen
// in package idempotency places the blips exactly; this runs the same on
// a real server at whatever phase.
func r152Until(off time.Duration) { time.Sleep(off) }

// Real faults: a healthy Redis frozen twice for ~550 ms, about 10.5 s
// apart, on a quiet guard; after the first timeout the client retries at
// once (0.45 s later, before the guard's probe) and the server answers.
// The second timeout fails the guard open, and the next repeat of a key
// the server holds runs again on this replica.
func TestReview152RedisTwoFreezesAndAQuickRetryRunStoredKeyAgain(t *testing.T) {
	srv := redistest.Start(t)
	store := idempotencystore.New(srv.Client(), fmt.Sprintf("r152:%d:", time.Now().UnixNano()))
	var opened atomic.Int64
	g := idempotency.NewGuard(store, idempotency.StoreTimeout(500*time.Millisecond),
		idempotency.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
		idempotency.WithListener(resilience.ListenerFunc(func(e resilience.Event) {
			if e.Kind == resilience.EventSharedStateUnavailable {
				opened.Add(1)
			}
		})))
	run := func(k string) string {
		cl, rec, err := g.Begin(context.Background(), "s", k, "fp-"+k)
		switch {
		case err != nil:
			return "err"
		case rec != nil:
			return "replayed"
		}
		local := cl.Local()
		_ = cl.Complete(context.Background(), idempotency.Record{Status: 201, Body: []byte(k)})
		if local {
			return "ran-local"
		}
		return "ran"
	}
	if got := run("stored"); got != "ran" {
		t.Fatalf("first run: %s", got)
	}
	time.Sleep(11 * time.Second) // quiet
	r152Until(30 * time.Millisecond)
	t0 := time.Now() // ~ +0.03 s in the guard's second E
	srv.Freeze()
	got1 := run("blip") // fails at ~ E+0.53
	srv.Thaw()
	time.Sleep(time.Until(t0.Add(1050 * time.Millisecond))) // E+1.08: the retry, before the probe at ~E+1.53
	got2 := run("blip")
	time.Sleep(time.Until(t0.Add(10050 * time.Millisecond))) // E+10.08
	srv.Freeze()
	got3 := run("blip2") // fails at ~E+10.58: 10.05 s after the first, in second E+10
	srv.Thaw()
	got4 := run("stored")
	t.Logf("blip=%s retry=%s blip2=%s stored=%s opened=%d", got1, got2, got3, got4, opened.Load())
	if opened.Load() != 0 || got4 == "ran" || got4 == "ran-local" {
		t.Errorf("two ~550 ms freezes of a healthy Redis, the first retried at once: failed open %d, the stored key: %s", opened.Load(), got4)
	}
	time.Sleep(4 * time.Second) // the probes close it
}
