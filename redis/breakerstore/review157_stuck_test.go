package breakerstore_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/redis/breakerstore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// A replica vouches (it served the dependency alone through a frozen
// Redis, the fleet open); its own probe succeeds; Redis freezes again for
// longer than the hold (3 flush intervals) before its flush tells the
// store; on thaw, the queued flush closes the fleet and publishes it,
// heard by Watch before the next flush's answer. Then the dependency fails
// for good: the promise is that the fleet reopens within a couple of
// flush intervals.
func TestReview157VouchProbeThenFreezeRealRedis(t *testing.T) {
	srv := redistest.Start(t)
	st := breakerstore.New(srv.Client(), "r157s")
	var failing atomic.Bool
	b := breaker.New("dep",
		breaker.FailureRate(0.5, 4), breaker.Window(10*time.Second, 10),
		breaker.OpenTimeout(600*time.Millisecond), breaker.HalfOpenRequests(1),
		breaker.FlushInterval(100*time.Millisecond), breaker.Shared(st))
	defer b.Close()
	call := func() error {
		return b.Execute(context.Background(), func(context.Context) error {
			if failing.Load() {
				return errors.New("boom")
			}
			return nil
		})
	}
	failing.Store(true)
	deadline := time.Now().Add(3 * time.Second)
	for b.FleetState() != resilience.StateOpen {
		if time.Now().After(deadline) {
			t.Fatal("the fleet did not open")
		}
		_ = call()
		time.Sleep(20 * time.Millisecond)
	}
	srv.Freeze()
	failing.Store(false)
	ran := 0
	for range 45 { // 900 ms: alone after 600, successes
		if call() == nil {
			ran++
		}
		time.Sleep(20 * time.Millisecond)
	}
	if ran == 0 {
		srv.Thaw()
		t.Fatal("no call ran while alone")
	}
	srv.Thaw()
	time.Sleep(250 * time.Millisecond) // flushes: the stale opening, half-open: vouching
	if err := call(); err != nil {     // the replica's own probe
		t.Fatalf("probe: %v", err)
	}
	srv.Freeze()
	time.Sleep(450 * time.Millisecond)
	srv.Thaw()
	time.Sleep(300 * time.Millisecond)
	t.Logf("after thaw: fleet %v", b.FleetState())
	failing.Store(true)
	start := time.Now()
	for time.Since(start) < 2*time.Second {
		_ = call()
		if b.FleetState() == resilience.StateOpen {
			t.Logf("reopened after %v", time.Since(start))
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	fs, err := b.Fleet(context.Background())
	t.Errorf("the dependency failing for 2 s, the fleet did not reopen: store says %+v (%v)", fs, err)
}
