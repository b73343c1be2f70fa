package breaker_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// forceMem is a shared store in memory that keeps a fleet closed and a
// fleet-wide mode, as the Redis one does (a new ForceVersion at each
// Force). Each replica reaches it through a forceView that can be cut off
// or made to hang until its context ends.
type forceMem struct {
	mu       sync.Mutex
	mode     breaker.Forcing
	version  uint64
	forces   int
	restores int
}

type forceView struct {
	m    *forceMem
	down atomic.Bool
	hang atomic.Bool
}

func (v *forceView) fault(ctx context.Context) error {
	if v.hang.Load() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Minute):
			return errors.New("no answer for a minute")
		}
	}
	if v.down.Load() {
		return errDown
	}
	return nil
}

func (v *forceView) Sync(ctx context.Context, _ string, _ breaker.Sync) (breaker.Fleet, error) {
	if err := v.fault(ctx); err != nil {
		return breaker.Fleet{}, err
	}
	v.m.mu.Lock()
	defer v.m.mu.Unlock()
	return breaker.Fleet{State: resilience.StateClosed, Generation: 1, ForceVersion: v.m.version}, nil
}

func (v *forceView) Force(ctx context.Context, _ string, f breaker.Forcing, after uint64) error {
	if err := v.fault(ctx); err != nil {
		return err
	}
	v.m.mu.Lock()
	defer v.m.mu.Unlock()
	v.m.mode, v.m.forces = f, v.m.forces+1
	v.m.version = max(v.m.version, after) + 1
	return nil
}

func (v *forceView) Restore(ctx context.Context, _ string, f breaker.Forcing, version uint64) error {
	if err := v.fault(ctx); err != nil {
		return err
	}
	v.m.mu.Lock()
	defer v.m.mu.Unlock()
	if v.m.version < version {
		v.m.mode, v.m.version, v.m.restores = f, version, v.m.restores+1
	}
	return nil
}

func (v *forceView) Forced(ctx context.Context, _ string) (breaker.Forcing, uint64, error) {
	if err := v.fault(ctx); err != nil {
		return breaker.Forcing{}, 0, err
	}
	v.m.mu.Lock()
	defer v.m.mu.Unlock()
	return v.m.mode, v.m.version, nil
}

var _ breaker.SharedForcer = (*forceView)(nil)

const forceFlush = 100 * time.Millisecond

// forceReplica is a shared breaker on m, through a view of its own.
func forceReplica(t *testing.T, m *forceMem) (*breaker.Breaker, *forceView) {
	v := &forceView{m: m}
	b := breaker.New("payments", breaker.Shared(v), breaker.FailureRate(0.5, 10), breaker.FlushInterval(forceFlush))
	t.Cleanup(func() { _ = b.Close() })
	return b, v
}

// forcedOpen is two replicas on m, forced open by an operator on the
// first, the second having taken it.
func forcedOpen(t *testing.T, m *forceMem) (a *breaker.Breaker, av *forceView, b *breaker.Breaker) {
	a, av = forceReplica(t, m)
	b, _ = forceReplica(t, m)
	require.NoError(t, a.SetMode(t.Context(), breaker.ForcedOpen, "alice"))
	time.Sleep(3 * forceFlush)
	require.Equal(t, breaker.ForcedOpen, b.Mode().Mode)
	return a, av, b
}

// The operator sets Normal on replica A while the store is down for A:
// A takes it, and once the store answers A again, A's flusher writes it
// there, and replica B, forced open until then, takes it too. A store
// fault does not keep calls to a healthy dependency blocked fleet-wide.
func TestAModeTheStoreMissedIsWrittenWhenItAnswersAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := &forceMem{}
		a, av, b := forcedOpen(t, m)

		av.down.Store(true)
		assert.ErrorIs(t, a.SetMode(t.Context(), breaker.Normal, "bob"), errDown)
		assert.Equal(t, breaker.Normal, a.Mode().Mode, "A takes it at once")
		time.Sleep(10 * forceFlush)
		assert.Equal(t, breaker.ForcedOpen, b.Mode().Mode, "the store never had it")

		av.down.Store(false)
		time.Sleep(3 * forceFlush)
		assert.Equal(t, breaker.Forcing{Mode: breaker.Normal, By: "bob", At: a.Mode().At}, b.Mode(), "written again, and taken")
		assert.NoError(t, b.Execute(t.Context(), func(context.Context) error { return nil }))
		m.mu.Lock()
		forces := m.forces
		m.mu.Unlock()
		time.Sleep(3 * forceFlush)
		m.mu.Lock()
		defer m.mu.Unlock()
		assert.Equal(t, 2, m.forces, "written again once")
		assert.Equal(t, forces, m.forces)
	})
}

// A mode that replica A could not write is not written over one that
// replica B set later: B's is the operator's last word, and A takes it.
func TestAModeTheStoreMissedDoesNotOverwriteALaterOne(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := &forceMem{}
		a, av := forceReplica(t, m)
		b, _ := forceReplica(t, m)
		av.down.Store(true)
		assert.Error(t, a.SetMode(t.Context(), breaker.ForcedClosed, "bob"))
		time.Sleep(time.Second)
		require.NoError(t, b.SetMode(t.Context(), breaker.ForcedOpen, "carol"))
		later := b.Mode()

		av.down.Store(false)
		time.Sleep(3 * forceFlush)
		m.mu.Lock()
		assert.Equal(t, later, m.mode, "carol's stays the fleet's")
		m.mu.Unlock()
		assert.Equal(t, later, b.Mode())
		assert.Equal(t, later, a.Mode(), "A takes the later mode")
	})
}

// SetMode's write to the store is bounded even when its context is not
// (a dashboard's request): a store that hangs holds the operator 2 s, and
// the mode is written once the store answers.
func TestSetModeBoundsTheStoresWrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := &forceMem{}
		a, av := forceReplica(t, m)
		av.hang.Store(true)
		start := time.Now()
		assert.ErrorIs(t, a.SetMode(context.Background(), breaker.ForcedOpen, "alice"), context.DeadlineExceeded)
		assert.Equal(t, 2*time.Second, time.Since(start))
		av.hang.Store(false)
		time.Sleep(3 * forceFlush)
		m.mu.Lock()
		defer m.mu.Unlock()
		assert.Equal(t, a.Mode(), m.mode)
	})
}

// A store that went back in time (restored from an older snapshot: an
// older mode under an older version; or restarted empty) does not give
// the replicas back a mode revoked since: they keep theirs and write it
// back under its version, once for the fleet. A replica that missed the
// revocation writes back its older mode, and takes the newer one the
// others write back. A mode set after that is taken by all.
func TestAModeFromAStoreThatWentBackIsNotTaken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := &forceMem{}
		a, _, b := forcedOpen(t, m)
		c, cv := forceReplica(t, m)
		time.Sleep(3 * forceFlush)
		require.Equal(t, breaker.ForcedOpen, c.Mode().Mode)
		m.mu.Lock()
		revoked, revokedAt := m.mode, m.version
		m.mu.Unlock()
		cv.down.Store(true) // c misses the revocation
		require.NoError(t, a.SetMode(t.Context(), breaker.Normal, "bob"))
		normal := a.Mode()
		time.Sleep(3 * forceFlush)
		require.Equal(t, normal, b.Mode())
		require.Equal(t, breaker.ForcedOpen, c.Mode().Mode)
		m.mu.Lock()
		bobs := m.version
		m.mu.Unlock()

		// Back to the snapshot: a and b write bob's back.
		m.mu.Lock()
		m.mode, m.version, m.forces = revoked, revokedAt, 0
		m.mu.Unlock()
		time.Sleep(3 * forceFlush)
		for _, r := range []*breaker.Breaker{a, b} {
			assert.Equal(t, normal, r.Mode(), "a revoked mode taken back")
			assert.NoError(t, r.Execute(t.Context(), func(context.Context) error { return nil }))
		}
		m.mu.Lock()
		assert.Equal(t, normal, m.mode, "written back")
		assert.Equal(t, bobs, m.version, "under its version")
		assert.Equal(t, 1, m.restores, "written back once")
		assert.Zero(t, m.forces, "no new version")
		m.mu.Unlock()

		// Restarted empty, c first: its older mode, then bob's over it.
		m.mu.Lock()
		m.mode, m.version, m.restores = breaker.Forcing{}, 0, 0
		m.mu.Unlock()
		cv.down.Store(false)
		time.Sleep(5 * forceFlush)
		for _, r := range []*breaker.Breaker{a, b, c} {
			assert.Equal(t, normal, r.Mode(), "the newest version's mode stays")
		}
		m.mu.Lock()
		assert.Equal(t, normal, m.mode)
		assert.Equal(t, bobs, m.version)
		m.mu.Unlock()

		// The store back at version 1 (its clock, if it counts in time,
		// behind): a mode set now is newer than what the replicas took.
		m.mu.Lock()
		m.mode, m.version = revoked, 1
		m.mu.Unlock()
		require.NoError(t, b.SetMode(t.Context(), breaker.ForcedClosed, "carol"))
		time.Sleep(3 * forceFlush)
		for _, r := range []*breaker.Breaker{a, b, c} {
			assert.Equal(t, breaker.ForcedClosed, r.Mode().Mode, "a mode set after the store went back")
		}
	})
}

// A mode the store missed is written again whatever the clocks: a forced
// open set on a replica whose clock runs a minute ahead does not outrank
// a Normal set later, while the store was down, on another.
func TestAModeTheStoreMissedIsWrittenOverAModeFromAFastClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := &forceMem{}
		b, bv := forceReplica(t, m)
		c, _ := forceReplica(t, m)
		ahead := breaker.Forcing{Mode: breaker.ForcedOpen, By: "alice", At: time.Now().Add(time.Minute)}
		require.NoError(t, (&forceView{m: m}).Force(t.Context(), "payments", ahead, 0))
		time.Sleep(3 * forceFlush)
		require.Equal(t, ahead.Mode, c.Mode().Mode)

		bv.down.Store(true)
		require.Error(t, b.SetMode(t.Context(), breaker.Normal, "bob"))
		bv.down.Store(false)
		time.Sleep(3 * forceFlush)
		m.mu.Lock()
		assert.Equal(t, "bob", m.mode.By, "written again")
		m.mu.Unlock()
		assert.Equal(t, breaker.Normal, c.Mode().Mode, "taken by the fleet")
		assert.NoError(t, c.Execute(t.Context(), func(context.Context) error { return nil }))
	})
}
