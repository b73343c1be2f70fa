package breakerstore_test

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/redis/breakerstore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// review111Shift moves the fleet's times (its opening, its last change)
// on by d, KEEPTTL: what a server whose clock was d ahead would have
// written, seen by a server with the right clock (a failover to a master
// whose clock is d behind the old one's, or an NTP step of d back).
func review111Shift(t *testing.T, c *redis.Client, key string, d time.Duration) {
	t.Helper()
	ctx := context.Background()
	for _, k := range []string{key + ":open", key + ":since"} {
		v, err := c.Get(ctx, k).Int64()
		if err != nil {
			t.Fatalf("GET %s: %v", k, err)
		}
		if err := c.Do(ctx, "SET", k, strconv.FormatInt(v+d.Milliseconds(), 10), "KEEPTTL").Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// The docs (shared-breaker.md, "Partitions") say of a new master whose
// clock is behind the old one's: "counts lost, never a breaker held open".
// A failover (Sentinel, a managed Redis) to a replica whose clock is 3 s
// behind the master's, while the fleet is open: the replicated open key
// holds the old master's time, and the new master finds the fleet open
// until its own clock reaches it, confirming "open" at every flush, so no
// replica's staleness bound (OpenTimeout) ever lets it decide alone.
func TestReview111FailoverToASlowClockHoldsTheFleetOpen(t *testing.T) {
	const skew = 3 * time.Second
	server := redistest.Start(t)
	client := server.Client()
	store := breakerstore.New(client, "r111skew:")

	const openTimeout, flush = 500 * time.Millisecond, 50 * time.Millisecond
	mk := func() *breaker.Breaker {
		return breaker.New("dep", breaker.Shared(store), breaker.FailureRate(0.5, 10),
			breaker.Window(10*time.Second, 10), breaker.OpenTimeout(openTimeout), breaker.FlushInterval(flush))
	}
	fleet := []*breaker.Breaker{mk(), mk()}
	defer func() {
		for _, b := range fleet {
			_ = b.Close()
		}
	}()

	var healthy atomic.Bool
	errDown := errors.New("dependency down")
	op := func(context.Context) error {
		if healthy.Load() {
			return nil
		}
		return errDown
	}
	ctx := context.Background()
	deadline := time.Now().Add(3 * time.Second)
	for fleet[0].FleetState() != resilience.StateOpen || fleet[1].FleetState() != resilience.StateOpen {
		if time.Now().After(deadline) {
			t.Fatal("the fleet did not open")
		}
		for _, b := range fleet {
			_ = b.Execute(ctx, op)
		}
		time.Sleep(2 * time.Millisecond)
	}
	opened := time.Now()
	// The server's clock goes 3 s back (or: a failover to a master whose
	// clock is 3 s behind); the dependency is healthy from now on.
	review111Shift(t, client, "r111skew:{dep}", skew)
	healthy.Store(true)
	back := time.Now()

	firstOK := make([]time.Duration, len(fleet))
	rejected := 0
	for time.Since(back) < 5*time.Second {
		done := true
		for i, b := range fleet {
			if firstOK[i] != 0 {
				continue
			}
			done = false
			if err := b.Execute(ctx, op); err == nil {
				firstOK[i] = time.Since(back)
			} else if breaker.IsRejection(err) {
				rejected++
			}
		}
		if done {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("fleet opened %v before the clock step; first success per replica after it: %v; %d calls rejected with the dependency healthy",
		back.Sub(opened).Round(time.Millisecond), firstOK, rejected)
	// The documented recovery bound: OpenTimeout + 2 flush intervals from
	// the dependency being healthy; allow as much again for the failover.
	bound := 2 * (openTimeout + 2*flush)
	for i, d := range firstOK {
		if d == 0 || d > bound {
			t.Errorf("replica %d: first success %v after the dependency was healthy (0: none in 5 s), bound %v: the fleet was held open by the new master's slow clock", i, d, bound)
		}
	}
}
