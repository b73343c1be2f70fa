package breaker_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// A replica made while the fleet is open learns it from its first flush,
// sent at once, before its first call goes: the call is refused, not sent
// to the dependency the fleet holds open (review139).
func TestNewReplicaRefusesAtAnOpenFleetFromItsFirstCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newMemStore()
		opts := []breaker.Option{breaker.Shared(store), breaker.FlushInterval(100 * time.Millisecond),
			breaker.FailureRate(0.5, 5), breaker.ConsecutiveFailures(0), breaker.OpenTimeout(10 * time.Second)}
		a := breaker.New("hello", opts...)
		defer a.Close()
		open52(t, a)
		b := breaker.New("hello", opts...)
		defer b.Close()
		ran := false
		err := b.Execute(t.Context(), func(context.Context) error { ran = true; return nil })
		assert.ErrorIs(t, err, breaker.ErrOpen)
		assert.False(t, ran)
		assert.Equal(t, resilience.StateOpen, b.FleetState())
	})
}

// A store that hangs as the breaker is made holds up its first call for
// a tenth of a flush interval at most; the call then goes by its own
// breaker, and so do the calls after it, at once.
func TestFirstCallWaitsForAHangingStoreATenthOfAnInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &slowStore52{memStore: newMemStore()}
		st.hang.Store(true)
		const every = 100 * time.Millisecond
		b := breaker.New("hello-hang", breaker.Shared(st), breaker.FlushInterval(every), breaker.FailureRate(0.5, 5))
		defer b.Close()
		start := time.Now()
		require.NoError(t, b.Execute(t.Context(), func(context.Context) error { return nil }))
		assert.Equal(t, every/10, time.Since(start), "the first call's wait")
		start = time.Now()
		require.NoError(t, b.Execute(t.Context(), func(context.Context) error { return nil }))
		assert.Zero(t, time.Since(start), "the second call's wait")
		st.hang.Store(false)
	})
}

// The wait for the first flush takes a tenth of the time a call has left
// at most, never its deadline: a call with 5 ms left waits 0.5 ms, and
// goes on.
func TestFirstCallWaitsATenthOfItsTimeLeft(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &slowStore52{memStore: newMemStore()}
		st.hang.Store(true)
		b := breaker.New("hello-short", breaker.Shared(st), breaker.FlushInterval(100*time.Millisecond), breaker.FailureRate(0.5, 5))
		defer b.Close()
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Millisecond)
		defer cancel()
		start := time.Now()
		var waited time.Duration
		require.NoError(t, b.Execute(ctx, func(ctx context.Context) error { waited = time.Since(start); return ctx.Err() }))
		assert.Equal(t, 500*time.Microsecond, waited)
		st.hang.Store(false)
	})
}

// panicStore's Sync panics.
type panicStore struct{ *memStore }

func (panicStore) Sync(context.Context, string, breaker.Sync) (breaker.Fleet, error) {
	panic("store bug")
}

// A store whose Sync panics is a store that fails: the replica goes by its
// own breaker and says so, its calls go on (review141: the panic ended
// the process).
func TestStoreThatPanicsIsAStoreThatFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var unavailable []error
		b := breaker.New("panics", breaker.Shared(panicStore{newMemStore()}), breaker.FlushInterval(100*time.Millisecond),
			breaker.FailureRate(0.5, 5), breaker.WithListener(resilience.ListenerFunc(func(e resilience.Event) {
				if e.Kind == resilience.EventSharedStateUnavailable {
					unavailable = append(unavailable, e.Err)
				}
			})))
		for range 5 {
			require.NoError(t, b.Execute(t.Context(), func(context.Context) error { return nil }))
			time.Sleep(100 * time.Millisecond)
		}
		require.Error(t, b.Close())
		require.Len(t, unavailable, 1)
		assert.ErrorContains(t, unavailable[0], "panicked: store bug")
	})
}
