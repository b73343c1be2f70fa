package breakerstore_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/redis/breakerstore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// The settings of these tests: the bound of a recovery is OpenTimeout + 2
// flush intervals, 1.1 s.
const (
	tightOpen  = time.Second
	tightFlush = 50 * time.Millisecond
)

func tightOptions(store breaker.SharedStore) []breaker.Option {
	return []breaker.Option{breaker.Shared(store), breaker.FailureRate(0.5, 4), breaker.Window(10*time.Second, 10),
		breaker.ConsecutiveFailures(0), breaker.OpenTimeout(tightOpen), breaker.FlushInterval(tightFlush), breaker.HalfOpenRequests(1)}
}

func tightBreaker(t *testing.T, name string, store breaker.SharedStore) *breaker.Breaker {
	b := breaker.New(name, tightOptions(store)...)
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// openFleet opens the fleet with b's failures and returns when b has heard
// it.
func openFleet(t *testing.T, b *breaker.Breaker) time.Time {
	for range 10 {
		_ = b.Execute(context.Background(), func(context.Context) error { return errDown })
	}
	require.Eventually(t, func() bool { return b.FleetState() == resilience.StateOpen }, time.Second, time.Millisecond)
	return time.Now()
}

// loseGrant applies a Sync, and loses the answer of the first one that
// granted a probe.
type loseGrant struct {
	breaker.SharedStore
	lost atomic.Bool
}

func (l *loseGrant) Sync(ctx context.Context, name string, s breaker.Sync) (breaker.Fleet, error) {
	f, err := l.SharedStore.Sync(ctx, name, s)
	if err == nil && f.ProbeGranted && l.lost.CompareAndSwap(false, true) {
		return breaker.Fleet{}, context.DeadlineExceeded
	}
	return f, err
}

// TestLostGrantIsGivenBack: the answer to the flush that granted the only
// probe is lost; the flush sent again gets the grant back, and the first
// success comes within OpenTimeout + 2 flush intervals of the opening,
// not an OpenTimeout later.
func TestLostGrantIsGivenBack(t *testing.T) {
	srv := redistest.Start(t)
	store := &loseGrant{SharedStore: breakerstore.New(srv.Client(), "test:")}
	b := tightBreaker(t, fleetName(t), store)
	opened := openFleet(t, b)
	for b.Execute(context.Background(), func(context.Context) error { return nil }) != nil {
		require.Less(t, time.Since(opened), 5*time.Second, "never served")
		time.Sleep(2 * time.Millisecond)
	}
	first := time.Since(opened)
	t.Logf("first success %v after the fleet opened", first)
	assert.True(t, store.lost.Load(), "the answer that granted the probe was lost")
	assert.LessOrEqual(t, first, tightOpen+2*tightFlush+50*time.Millisecond)
}

// TestIdleGrantIsGivenUp: a replica granted the only probe goes idle; it
// gives the grant up within a couple of flush intervals, another replica
// probes, and the idle one, calling again while that probe runs, is
// rejected: never two probes at once.
func TestIdleGrantIsGivenUp(t *testing.T) {
	srv := redistest.Start(t)
	name := fleetName(t)
	a := tightBreaker(t, name, breakerstore.New(srv.Client(), "test:"))
	b := tightBreaker(t, name, breakerstore.New(srv.Client(), "test:"))
	openFleet(t, a)
	// a wants to probe while the fleet is open, so that the flush that
	// finds it half-open grants a the probe; then a goes idle.
	for a.FleetState() == resilience.StateOpen {
		_ = a.Execute(context.Background(), func(context.Context) error { return errDown })
		time.Sleep(5 * time.Millisecond)
	}
	idle := time.Now()
	var inflight, most atomic.Int64
	probed := make(chan time.Time, 1)
	release := make(chan struct{})
	enter := func() func() { // a call reaches the dependency
		n := inflight.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		return func() { inflight.Add(-1) }
	}
	op := func(context.Context) error {
		running := enter()
		defer running()
		select {
		case probed <- time.Now():
		default:
		}
		<-release
		return nil
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for b.Execute(context.Background(), op) != nil && time.Since(idle) < 3*time.Second {
			time.Sleep(2 * time.Millisecond)
		}
	}()
	var at time.Time
	select {
	case at = <-probed:
	case <-time.After(3 * time.Second):
	}
	if !at.IsZero() {
		t.Logf("the other replica probed %v after the granted one went idle", at.Sub(idle))
		// a's grant stays at most 2 flush intervals, then b's next flush.
		assert.LessOrEqual(t, at.Sub(idle), 4*tightFlush, "the idle replica gave its grant up")
		// The idle replica calls again while b's probe runs: rejected.
		for range 20 {
			_ = a.Execute(context.Background(), func(context.Context) error { enter()(); return nil })
			time.Sleep(10 * time.Millisecond)
		}
	} else {
		assert.Fail(t, "the other replica never probed")
	}
	close(release)
	<-done
	assert.EqualValues(t, 1, most.Load(), "HalfOpenRequests probes at once")
}

// TestRestartedEmptyKeepsTheOpenTimer: a server restarted empty while the
// fleet is open takes the open state back as opened when the replica
// heard it, not at the restart: half-open within OpenTimeout (and a flush
// or two) of the opening.
func TestRestartedEmptyKeepsTheOpenTimer(t *testing.T) {
	srv := redistest.Start(t)
	name := fleetName(t)
	store := breakerstore.New(srv.Client(), "test:")
	b := tightBreaker(t, name, store)
	opened := openFleet(t, b)
	time.Sleep(700 * time.Millisecond)
	srv.Kill()
	srv.Restart()
	p := breaker.FleetPolicy{Window: 10 * time.Second, Buckets: 10, OpenTimeout: tightOpen}
	var restored bool
	for time.Since(opened) < 3*time.Second {
		st, err := store.Read(context.Background(), name, p)
		if err == nil && st.State == resilience.StateOpen {
			restored = true
		}
		if err == nil && st.State == resilience.StateHalfOpen {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	half := time.Since(opened)
	t.Logf("half-open %v after the opening (restarted 700 ms after it)", half)
	assert.True(t, restored, "the open state was taken back")
	assert.LessOrEqual(t, half, tightOpen+2*tightFlush+50*time.Millisecond)
}

// TestRestartedEmptyIgnoresAStaleView: a replica cut off from Redis while
// the fleet was open, for longer than OpenTimeout, does not give that
// stale open state back to a server restarted empty.
func TestRestartedEmptyIgnoresAStaleView(t *testing.T) {
	srv := redistest.Start(t)
	proxy := redistest.NewProxy(t, srv.Addr())
	name := fleetName(t)
	c := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	b := tightBreaker(t, name, breakerstore.New(c, "test:"))
	openFleet(t, b)
	proxy.Cut()
	time.Sleep(tightOpen + 4*tightFlush) // unconfirmed for longer than OpenTimeout
	srv.Kill()
	srv.Restart()
	proxy.Heal()
	store := breakerstore.New(srv.Client(), "test:")
	p := breaker.FleetPolicy{Window: 10 * time.Second, Buckets: 10, OpenTimeout: tightOpen}
	var last breaker.FleetStatus
	var reopened bool
	start := time.Now()
	for time.Since(start) < 500*time.Millisecond {
		st, err := store.Read(context.Background(), name, p)
		if err == nil {
			last = st
			reopened = reopened || st.State != resilience.StateClosed
		}
		time.Sleep(5 * time.Millisecond)
	}
	assert.False(t, reopened, "the stale view reopened the fleet")
	assert.NotZero(t, last.Generation, "the replica flushed after the restart")
}

// TestRestartedEmptyTakesANewGeneration: a server restarted empty takes a
// generation never used before, so that a replica cut off earlier does not
// bring back a batch of an old generation as current, whatever the
// generation the first replica to flush sends.
func TestRestartedEmptyTakesANewGeneration(t *testing.T) {
	srv := redistest.Start(t)
	store := breakerstore.New(srv.Client(), "test:")
	name := fleetName(t)
	p := breaker.FleetPolicy{Rate: 0.5, MinRequests: 4, Window: 10 * time.Second, Buckets: 10, OpenTimeout: tightOpen,
		HalfOpenRequests: 1, ProbeTimeout: tightOpen, FlushInterval: tightFlush}
	ctx := context.Background()
	first, err := store.Sync(ctx, name, breaker.Sync{Batch: "a-1", Requests: 1, GenerationUnknown: true, Replica: "a", Policy: p})
	require.NoError(t, err)
	old := first.Generation
	opened, err := store.Sync(ctx, name, breaker.Sync{Batch: "a-2", Requests: 4, Failures: 4, Generation: old, Replica: "a", Policy: p})
	require.NoError(t, err)
	require.Equal(t, resilience.StateOpen, opened.State)
	srv.Kill()
	srv.Restart()
	// A new replica, which knows no generation, flushes first.
	var restored breaker.Fleet
	require.Eventually(t, func() bool {
		restored, err = store.Sync(ctx, name, breaker.Sync{GenerationUnknown: true, Replica: "n", Policy: p})
		return err == nil
	}, 2*time.Second, 10*time.Millisecond)
	assert.NotContains(t, []uint64{old, opened.Generation}, restored.Generation, "a generation used before")
	// A replica cut off before the fleet opened brings its batch back.
	got, err := store.Sync(ctx, name, breaker.Sync{Batch: "c-1", Requests: 4, Failures: 4, Generation: old, Replica: "c", Policy: p})
	require.NoError(t, err)
	assert.Equal(t, resilience.StateClosed, got.State, "an old generation's batch reopened the fleet")
	st, err := store.Read(ctx, name, p)
	require.NoError(t, err)
	assert.Zero(t, st.Requests, "an old generation's batch counted")
}
