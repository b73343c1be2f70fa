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

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/resilience"
)

var r18Down = errors.New("r18: store down")

// r18Mem is a store in memory that keeps a fleet closed and a forced mode
// under a version.
type r18Mem struct {
	mu      sync.Mutex
	mode    breaker.Forcing
	version uint64
	forces  int
	log     []string
}

// r18View is one replica's way to it; failForce fails Force only (the
// flushes get through), failAll fails everything.
type r18View struct {
	m         *r18Mem
	name      string
	failForce atomic.Bool
	failAll   atomic.Bool
}

func (v *r18View) Sync(ctx context.Context, _ string, _ breaker.Sync) (breaker.Fleet, error) {
	if v.failAll.Load() {
		return breaker.Fleet{}, r18Down
	}
	v.m.mu.Lock()
	defer v.m.mu.Unlock()
	return breaker.Fleet{State: resilience.StateClosed, Generation: 1, ForceVersion: v.m.version}, nil
}

func (v *r18View) Force(ctx context.Context, _ string, f breaker.Forcing, after uint64) error {
	if v.failAll.Load() || v.failForce.Load() {
		return r18Down
	}
	v.m.mu.Lock()
	defer v.m.mu.Unlock()
	v.m.mode, v.m.forces = f, v.m.forces+1
	v.m.version = max(v.m.version, after) + 1
	v.m.log = append(v.m.log, v.name+" force "+f.Mode.String())
	return nil
}

func (v *r18View) Restore(ctx context.Context, _ string, f breaker.Forcing, version uint64) error {
	if v.failAll.Load() {
		return r18Down
	}
	v.m.mu.Lock()
	defer v.m.mu.Unlock()
	if v.m.version < version {
		v.m.mode, v.m.version = f, version
		v.m.log = append(v.m.log, v.name+" restore "+f.Mode.String())
	}
	return nil
}

func (v *r18View) Forced(ctx context.Context, _ string) (breaker.Forcing, uint64, error) {
	if v.failAll.Load() {
		return breaker.Forcing{}, 0, r18Down
	}
	v.m.mu.Lock()
	defer v.m.mu.Unlock()
	return v.m.mode, v.m.version, nil
}

func (m *r18Mem) restart() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.mode, m.version = breaker.Forcing{}, 0
	m.log = append(m.log, "restart")
}

func (m *r18Mem) get() (breaker.Mode, uint64, int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.mode.Mode, m.version, m.forces
}

const r18Flush = 100 * time.Millisecond

func r18Replica(t *testing.T, m *r18Mem, name string) (*breaker.Breaker, *r18View) {
	v := &r18View{m: m, name: name}
	b := breaker.New("payments", breaker.Shared(v), breaker.FailureRate(0.5, 10), breaker.FlushInterval(r18Flush))
	t.Cleanup(func() { _ = b.Close() })
	return b, v
}

// TestReview18ResentModeIsOwnWrite: SetMode(ForcedOpen) fails, the flusher
// writes it again (success); before the replica's next flush takes that
// version, the operator sets Normal, which fails too. The store holds the
// replica's own resent ForcedOpen, under a version it had not taken: the
// fix's r.written knows only SetMode's successful writes, so Normal is
// dropped, and the replica then takes ForcedOpen back.
func TestReview18ResentModeIsOwnWrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := &r18Mem{}
		a, va := r18Replica(t, m, "a")
		time.Sleep(r18Flush + time.Millisecond)
		synctest.Wait()
		va.failForce.Store(true)
		assert.Error(t, a.SetMode(t.Context(), breaker.ForcedOpen, "alice"))
		va.failForce.Store(false)
		for _, _, n := m.get(); n == 0; _, _, n = m.get() {
			time.Sleep(time.Millisecond) // the flusher resends it
		}
		// within the same flush interval
		va.failForce.Store(true)
		assert.Error(t, a.SetMode(t.Context(), breaker.Normal, "alice"))
		va.failForce.Store(false)
		time.Sleep(10 * r18Flush)
		synctest.Wait()
		mode, v, _ := m.get()
		t.Logf("store %v v%d, replica %v; log %v", mode, v, a.Mode().Mode, m.log)
		assert.Equal(t, breaker.Normal, mode, "the operator's last mode, Normal, is lost fleet-wide")
		assert.Equal(t, breaker.Normal, a.Mode().Mode, "and on the replica that set it")
	})
}

// TestReview18OwnWriteThenFailSeveral: several SetModes on one replica, the
// succeeding ones never taken yet, failing ones between; the last wins.
func TestReview18OwnWriteThenFailSeveral(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := &r18Mem{}
		a, va := r18Replica(t, m, "a")
		b, _ := r18Replica(t, m, "b")
		time.Sleep(r18Flush + time.Millisecond)
		synctest.Wait()
		assert.NoError(t, a.SetMode(t.Context(), breaker.ForcedOpen, "alice"))
		time.Sleep(time.Millisecond)
		va.failForce.Store(true)
		assert.Error(t, a.SetMode(t.Context(), breaker.ForcedClosed, "alice"))
		va.failForce.Store(false)
		time.Sleep(time.Millisecond)
		assert.NoError(t, a.SetMode(t.Context(), breaker.Disabled, "alice"))
		time.Sleep(time.Millisecond)
		va.failForce.Store(true)
		assert.Error(t, a.SetMode(t.Context(), breaker.Normal, "alice"))
		va.failForce.Store(false)
		time.Sleep(10 * r18Flush)
		synctest.Wait()
		mode, _, _ := m.get()
		t.Logf("store %v, a %v, b %v; log %v", mode, a.Mode().Mode, b.Mode().Mode, m.log)
		assert.Equal(t, breaker.Normal, mode)
		assert.Equal(t, breaker.Normal, a.Mode().Mode)
		assert.Equal(t, breaker.Normal, b.Mode().Mode)
	})
}

// TestReview18RestartBetween: own write, store restarted empty, a failing
// SetMode, the other replica restores what it had taken; then a later
// SetMode by the other replica must win over a's older pending mode.
func TestReview18RestartBetween(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := &r18Mem{}
		a, va := r18Replica(t, m, "a")
		b, _ := r18Replica(t, m, "b")
		time.Sleep(r18Flush + time.Millisecond)
		synctest.Wait()
		assert.NoError(t, a.SetMode(t.Context(), breaker.ForcedOpen, "alice"))
		time.Sleep(3 * r18Flush) // every replica takes it
		synctest.Wait()
		m.restart()
		va.failAll.Store(true) // a cut off
		assert.Error(t, a.SetMode(t.Context(), breaker.Normal, "alice"))
		time.Sleep(3 * r18Flush) // b restores ForcedOpen
		synctest.Wait()
		// bob, on b, decides after alice's Normal: forced closed
		time.Sleep(time.Millisecond)
		assert.NoError(t, b.SetMode(t.Context(), breaker.ForcedClosed, "bob"))
		va.failAll.Store(false)
		time.Sleep(10 * r18Flush)
		synctest.Wait()
		mode, _, _ := m.get()
		t.Logf("store %v, a %v, b %v; log %v", mode, a.Mode().Mode, b.Mode().Mode, m.log)
		assert.Equal(t, breaker.ForcedClosed, mode, "bob's later mode")
		assert.Equal(t, a.Mode().Mode, b.Mode().Mode)
	})
}
