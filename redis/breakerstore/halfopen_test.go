package breakerstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/redis/breakerstore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// TestProbeAsTheFleetTurnsHalfOpen: a replica whose calls wait to probe
// asks for the probe as the fleet turns half-open (OpenTimeout after it
// heard of the opening), not at its next tick. The fleet opens half-way
// between the replica's ticks (at a flush of another replica's) and turns
// half-open half-way between them too (OpenTimeout is two flush
// intervals): the first success comes within a quarter of a flush
// interval of the half-open moment, not half an interval later. A run in
// which the test itself fell behind by more than an eighth of an interval
// says nothing: it is run again (three runs at most), or skipped.
func TestProbeAsTheFleetTurnsHalfOpen(t *testing.T) {
	srv := redistest.Start(t)
	const every, open = 600 * time.Millisecond, 1200 * time.Millisecond
	for run := range 3 {
		late, lag := firstProbeAfterHalfOpen(t, srv, every, open)
		t.Logf("run %d: first success %v after the fleet turned half-open (flush interval %v); the test fell behind by %v at most", run, late, every, lag)
		if lag > every/8 {
			continue
		}
		assert.Less(t, late, every/4, "the probe was asked for as the fleet turned half-open")
		return
	}
	t.Skip("the machine was too busy for the test to keep time")
}

// firstProbeAfterHalfOpen opens a fleet of two replicas with a flush
// interval of every: a, whose ticks are half-way between b's, opens it;
// then b's calls want to probe. It returns how long after the fleet turned
// half-open, as b heard it, b's first call succeeded, and the longest the
// test's loops fell behind their 1 ms sleeps.
func firstProbeAfterHalfOpen(t *testing.T, srv *redistest.Server, every, open time.Duration) (late, lag time.Duration) {
	name := fleetName(t)
	replica := func() *breaker.Breaker {
		b := breaker.New(name, breaker.Shared(breakerstore.New(srv.Client(), "test:")), breaker.FailureRate(0.5, 4),
			breaker.Window(10*time.Second, 10), breaker.ConsecutiveFailures(0), breaker.OpenTimeout(open), breaker.FlushInterval(every))
		t.Cleanup(func() { _ = b.Close() })
		return b
	}
	b := replica() // its ticks: k intervals after now
	time.Sleep(every / 2)
	a := replica() // its ticks: half-way between b's
	for range 10 {
		_ = a.Execute(context.Background(), func(context.Context) error { return errDown })
	}
	tick := func(last *time.Time) {
		time.Sleep(time.Millisecond)
		now := time.Now()
		lag = max(lag, now.Sub(*last)-time.Millisecond)
		*last = now
	}
	last := time.Now()
	for b.FleetState() != resilience.StateOpen { // heard by pub/sub, at a's flush
		require.Less(t, time.Since(last), 3*every, "b heard the opening")
		tick(&last)
	}
	heard := time.Now()
	for b.Execute(context.Background(), func(context.Context) error { return nil }) != nil {
		require.Less(t, time.Since(heard), open+3*every, "b served")
		tick(&last)
	}
	return time.Since(heard.Add(open)), lag
}
