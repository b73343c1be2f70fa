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
)

// r16Forcer is a memStore that keeps a forced mode too; Force can be made
// to fail.
type r16Forcer struct {
	*memStore
	fmu       sync.Mutex
	f         breaker.Forcing
	v         uint64
	forceFail atomic.Bool
}

func (s *r16Forcer) Sync(ctx context.Context, name string, sy breaker.Sync) (breaker.Fleet, error) {
	got, err := s.memStore.Sync(ctx, name, sy)
	s.fmu.Lock()
	got.ForceVersion = s.v
	s.fmu.Unlock()
	return got, err
}

func (s *r16Forcer) Force(ctx context.Context, _ string, f breaker.Forcing, after uint64) error {
	if s.forceFail.Load() {
		return errors.New("store down")
	}
	s.fmu.Lock()
	defer s.fmu.Unlock()
	s.v = max(uint64(time.Now().UnixMilli()), s.v+1, after+1)
	s.f = f
	return nil
}

func (s *r16Forcer) Restore(ctx context.Context, _ string, f breaker.Forcing, version uint64) error {
	s.fmu.Lock()
	defer s.fmu.Unlock()
	if s.v >= version {
		return nil
	}
	s.f, s.v = f, version
	return nil
}

func (s *r16Forcer) Forced(ctx context.Context, _ string) (breaker.Forcing, uint64, error) {
	s.fmu.Lock()
	defer s.fmu.Unlock()
	return s.f, s.v, nil
}

// TestReview16OwnModeRevokedBeforeItsFlush: a replica forces open (written),
// and before a flush has taken that version back, sets Normal, whose write
// fails. The pending Normal is then dropped because the store's version
// (the replica's own forced open) is newer than the one it had taken: the
// replica takes its own forced open back, and the fleet stays forced open.
func TestReview16OwnModeRevokedBeforeItsFlush(t *testing.T) {
	store := &r16Forcer{memStore: newMemStore()}
	mk := func() *breaker.Breaker {
		b := breaker.New("pay", breaker.Shared(store), breaker.FailureRate(0.5, 10), breaker.FlushInterval(200*time.Millisecond))
		t.Cleanup(func() { b.Close() })
		return b
	}
	a, other := mk(), mk()
	time.Sleep(450 * time.Millisecond) // both flushed

	require.NoError(t, a.SetMode(t.Context(), breaker.ForcedOpen, "alice"))
	time.Sleep(5 * time.Millisecond) // a later ms: the old rule by At would resend
	store.forceFail.Store(true)
	require.Error(t, a.SetMode(t.Context(), breaker.Normal, "alice"), "the revert's write fails")
	store.forceFail.Store(false)

	time.Sleep(1200 * time.Millisecond)
	f, _, _ := store.Forced(t.Context(), "pay")
	t.Logf("store: %v by %s; a: %v; other: %v", f.Mode, f.By, a.Mode().Mode, other.Mode().Mode)
	assert.Equal(t, breaker.Normal, f.Mode, "the store keeps the operator's last mode")
	assert.Equal(t, breaker.Normal, a.Mode().Mode, "the replica keeps the operator's last mode")
	assert.Equal(t, breaker.Normal, other.Mode().Mode, "the fleet takes the operator's last mode")
}
