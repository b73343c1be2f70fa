package breaker_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// countingStore is review146's scripted store, recording the counts each
// flush sends, by the generation they are sent for.
type countingStore struct {
	*r146Fake
	mu    sync.Mutex
	byGen map[uint64][2]uint64 // requests, failures
}

func (s *countingStore) Sync(ctx context.Context, name string, sy breaker.Sync) (breaker.Fleet, error) {
	f, err := s.r146Fake.Sync(ctx, name, sy)
	if err == nil {
		s.mu.Lock()
		v := s.byGen[sy.Generation]
		s.byGen[sy.Generation] = [2]uint64{v[0] + sy.Requests, v[1] + sy.Failures}
		s.mu.Unlock()
	}
	return f, err
}

// countingWatching is countingStore with review146's pub/sub, which tells
// a change before the Sync that made it answers.
type countingWatching struct{ *countingStore }

func (s countingWatching) Watch(ctx context.Context, name string, changed func(breaker.Fleet)) error {
	return r146Watching{s.r146Fake}.Watch(ctx, name, changed)
}

func (s *countingStore) sent(gen uint64) [2]uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byGen[gen]
}

// A vouching replica's calls after its own probe are counted in the
// generation the probe's outcome leads to if it closed the fleet, and
// dropped with the opening if it reopened it. Before review153 the calls
// made between the probe and the flush that told it were sent under the
// half-open generation, which a store drops: a dependency failing again
// just after the fleet closed was not seen by the fleet.
func TestVouchedCallsAfterTheProbeCountInTheGenerationItCloses(t *testing.T) {
	errDown := errors.New("down")
	for _, tc := range []struct {
		name      string
		probe     error
		watch     bool // the closing heard by Watch (which says no Previous) before the flush's answer
		wantState resilience.State
		want      [2]uint64
	}{
		{"probe succeeds: counted in the closed generation", nil, false, resilience.StateClosed, [2]uint64{8, 8}},
		{"probe succeeds, closing heard by Watch first", nil, true, resilience.StateClosed, [2]uint64{8, 8}},
		{"probe fails: dropped with the opening", errDown, false, resilience.StateOpen, [2]uint64{0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fake := &r146Fake{state: resilience.StateClosed, gen: 1, hor: 1}
				store := &countingStore{r146Fake: fake, byGen: map[uint64][2]uint64{}}
				var shared breaker.SharedStore = store
				if tc.watch {
					shared = countingWatching{store}
				}
				b := r146New(shared)
				t.Cleanup(func() { _ = b.Close() })
				time.Sleep(250 * time.Millisecond)
				fake.set(resilience.StateOpen, true)
				time.Sleep(150 * time.Millisecond) // heard at a flush
				fake.setDown(true)
				time.Sleep(500 * time.Millisecond) // unconfirmed: alone
				for range 30 {
					require.NoError(t, b.Execute(t.Context(), r146Ok))
					time.Sleep(5 * time.Millisecond)
				}
				fake.set(resilience.StateHalfOpen, false)
				fake.setDown(false)
				time.Sleep(150 * time.Millisecond) // the rejoin flush: vouching
				require.Equal(t, resilience.StateClosed, b.FleetState(), "setup: not vouching")
				_, half := fake.snapshot()

				time.Sleep(50 * time.Millisecond) // mid-interval
				_ = b.Execute(t.Context(), func(context.Context) error { return tc.probe })
				for range 8 {
					require.ErrorIs(t, b.Execute(t.Context(), func(context.Context) error { return errDown }), errDown)
				}
				time.Sleep(350 * time.Millisecond) // the probe's flush, and the ones after

				st, gen := fake.snapshot()
				require.Equal(t, tc.wantState, st)
				require.Equal(t, half+1, gen)
				assert.Equal(t, tc.want, store.sent(gen), "requests and failures sent for the generation the probe led to")
			})
		})
	}
}
