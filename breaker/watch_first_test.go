package breaker_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// watchFirstStore is unreachable until up; its watcher delivers one change
// (the fleet just closed, generation 5) when told, before any flush gets an
// answer. It records every Sync it is sent.
type watchFirstStore struct {
	mu     sync.Mutex
	up     bool
	syncs  []breaker.Sync
	change chan breaker.Fleet
}

func (s *watchFirstStore) Sync(ctx context.Context, name string, sy breaker.Sync) (breaker.Fleet, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.up {
		return breaker.Fleet{}, errors.New("down")
	}
	s.syncs = append(s.syncs, sy)
	return breaker.Fleet{Generation: 5, ChangedFor: 5 * time.Millisecond}, nil
}

func (s *watchFirstStore) Watch(ctx context.Context, name string, changed func(breaker.Fleet)) error {
	select {
	case f := <-s.change:
		changed(f)
		<-ctx.Done()
	case <-ctx.Done():
	}
	return ctx.Err()
}

// A replica cut off from its start gathers an outage's failures; the link
// comes back as the fleet closes: the watcher hears the change (the fleet
// closed in generation 5) a moment before the first flush's answer. The
// outage's failures began before that change: they must not be sent as
// generation 5's (they would reopen the recovered fleet).
func TestAChangeHeardFromTheWatcherVoidsOutageCounts(t *testing.T) {
	st := &watchFirstStore{change: make(chan breaker.Fleet, 1)}
	b := breaker.New("w", breaker.Shared(st), breaker.FlushInterval(20*time.Millisecond),
		breaker.ConsecutiveFailures(0), breaker.FailureRate(0.5, 1000), breaker.Window(10*time.Second, 10))
	defer b.Close()
	time.Sleep(50 * time.Millisecond) // the first flushes fail: a pending batch of nothing
	for range 20 {
		_ = b.Execute(context.Background(), func(context.Context) error { return errors.New("outage") })
	}
	time.Sleep(30 * time.Millisecond)
	st.change <- breaker.Fleet{Generation: 5} // the fleet closed, as the link returns
	time.Sleep(5 * time.Millisecond)
	st.mu.Lock()
	st.up = true
	st.mu.Unlock()
	time.Sleep(100 * time.Millisecond)
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, sy := range st.syncs {
		if !sy.GenerationUnknown && sy.Generation == 5 && sy.Failures > 0 {
			t.Fatalf("the outage's %d failures were sent as the new generation's: %+v", sy.Failures, sy)
		}
	}
}

// The first flush's counts open the fleet, but its answer is lost: the
// replica hears the opening from the watcher only, with its batch still
// unacknowledged and of an unknown generation. The store is then cut off,
// and restarts empty once the replica's view has gone stale. The batch
// the replica sends again belongs to the generation the opening ended: a
// store that lost the record of having applied it must not count it again
// (it would reopen the fleet from the old evidence).
func TestCountsOfAnOpeningHeardFromTheWatcherAreNotCountedAgain(t *testing.T) {
	st := watchingStore{memStore: newMemStore()}
	st.lose.Store(1 << 30) // every answer lost; the Syncs are applied
	b := failedTenTimes(t, "again", st)
	require.Eventually(t, func() bool { return b.FleetState() == resilience.StateOpen }, 2*time.Second, time.Millisecond)
	st.fail.Store(true)
	time.Sleep(300 * time.Millisecond) // unconfirmed for longer than OpenTimeout: the view is closed
	require.Equal(t, resilience.StateClosed, b.FleetState())
	st.forget()
	st.lose.Store(0)
	st.fail.Store(false)
	for end := time.Now().Add(200 * time.Millisecond); time.Now().Before(end); time.Sleep(2 * time.Millisecond) {
		state, _ := st.state("again")
		require.Equal(t, resilience.StateClosed, state, "the batch that opened the fleet was counted again")
	}
	assert.Positive(t, st.syncs.Load())
}

// downThenEmpty is a store that fails every Sync until up, and is then a
// memStore that lost every fleet (restarted empty); its watcher delivers
// the changes sent to change.
type downThenEmpty struct {
	*memStore
	up     atomic.Bool
	tries  atomic.Int64
	change chan breaker.Fleet
}

func (s *downThenEmpty) Sync(ctx context.Context, name string, sy breaker.Sync) (breaker.Fleet, error) {
	if !s.up.Load() {
		s.tries.Add(1)
		return breaker.Fleet{}, errors.New("down")
	}
	return s.memStore.Sync(ctx, name, sy)
}

func (s *downThenEmpty) Watch(ctx context.Context, name string, changed func(breaker.Fleet)) error {
	for {
		select {
		case f := <-s.change:
			changed(f)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// A replica cut off from its start makes calls between two flushes; the
// watcher then hears the fleet change, and the store, restarted empty,
// answers again before the next flush. Those calls were made before the
// change: they must not reach the store as counts of an unknown
// generation, which it could no longer tell from the new generation's.
func TestCountsMadeBeforeAChangeHeardAreVoided(t *testing.T) {
	st := &downThenEmpty{memStore: newMemStore(), change: make(chan breaker.Fleet, 1)}
	p := breaker.FleetPolicy{Window: 10 * time.Second, Buckets: 10, OpenTimeout: time.Second}
	b := breaker.New("voided", breaker.Shared(st), breaker.FlushInterval(200*time.Millisecond),
		breaker.ConsecutiveFailures(0), breaker.FailureRate(0.5, 4), breaker.Window(p.Window, p.Buckets))
	defer b.Close()
	require.Eventually(t, func() bool { return st.tries.Load() >= 1 }, 2*time.Second, time.Millisecond)
	for range 10 { // just after a flush: counted for the next
		require.NoError(t, b.Execute(context.Background(), func(context.Context) error { return nil }))
	}
	st.change <- breaker.Fleet{Generation: 5}
	time.Sleep(20 * time.Millisecond)
	st.up.Store(true)
	require.Eventually(t, func() bool { return st.syncs.Load() >= 1 }, 2*time.Second, time.Millisecond)
	for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		got, err := st.Read(context.Background(), "voided", p)
		require.NoError(t, err)
		require.Zero(t, got.Requests, "calls made before the change were counted in the restarted store")
	}
}

// The first flush's counts open the fleet and its answer is lost; the
// store has no watcher, so the replica never hears of the opening. The
// store then restarts empty. A batch of an unknown generation that may
// have reached the store is not sent again: the store, having lost its
// record of it, would count it twice, and there is no generation to tell
// it by.
func TestAnUnknownBatchThatMayHaveBeenAppliedIsNotSentAgain(t *testing.T) {
	st := newMemStore()
	st.lose.Store(1 << 30) // every answer lost; the Syncs are applied
	failedTenTimes(t, "resent", st)
	require.Eventually(t, func() bool { state, _ := st.state("resent"); return state == resilience.StateOpen },
		2*time.Second, time.Millisecond)
	tries := st.syncs.Load()
	require.Eventually(t, func() bool { return st.syncs.Load() > tries+1 }, 2*time.Second, time.Millisecond) // sent again, lost again
	st.forget()
	st.lose.Store(0)
	for end := time.Now().Add(200 * time.Millisecond); time.Now().Before(end); time.Sleep(2 * time.Millisecond) {
		state, _ := st.state("resent")
		require.Equal(t, resilience.StateClosed, state, "the batch that opened the fleet was counted again")
	}
}

// failedTenTimes returns a new replica of name on st, flushing every 20
// ms, opening at 4 calls half failed, with 10 failures made before its
// first flush.
func failedTenTimes(t *testing.T, name string, st breaker.SharedStore) *breaker.Breaker {
	b := breaker.New(name, breaker.Shared(st), breaker.FlushInterval(20*time.Millisecond),
		breaker.ConsecutiveFailures(0), breaker.FailureRate(0.5, 4), breaker.Window(10*time.Second, 10),
		breaker.OpenTimeout(200*time.Millisecond), breaker.HalfOpenRequests(1))
	t.Cleanup(func() { _ = b.Close() })
	for range 10 {
		_ = b.Execute(context.Background(), func(context.Context) error { return errors.New("down") })
	}
	return b
}
