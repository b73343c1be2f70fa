package breaker

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/resilience"
)

type review141GapStore struct {
	fail atomic.Bool
	gate chan struct{}
}

func (s *review141GapStore) Sync(ctx context.Context, name string, sy Sync) (Fleet, error) {
	if s.fail.Load() {
		<-s.gate
		return Fleet{}, errors.New("store down")
	}
	return Fleet{State: resilience.StateClosed, Generation: 1}, nil
}

// A replica goes alone: down was set before forget took the core's lock.
// A failure counted in between is judged with FailureRate applied to the
// whole window, the calls the fleet judged: the review139 bug again.
// The interleaving is forced here by holding the core's lock as another
// call would (a busy replica's calls contend for it).
func TestReview141GoingAloneGap(t *testing.T) {
	opened := 0
	const trials = 200
	for trial := 0; trial < trials; trial++ {
		st := &review141GapStore{gate: make(chan struct{})}
		b := New("gap", Shared(st), FailureRate(0.3, 10), ConsecutiveFailures(0), Window(10*time.Second, 10),
			FlushInterval(5*time.Millisecond), OpenTimeout(time.Second))
		ctx := context.Background()
		fail := errors.New("503")
		// The fleet judged these: 40% failures on this replica, the fleet closed.
		for i := 0; i < 100; i++ {
			_ = b.Execute(ctx, func(context.Context) error {
				if i%5 < 2 {
					return fail
				}
				return nil
			})
		}
		// One call in flight.
		release := make(chan struct{})
		done := make(chan error)
		go func() {
			done <- b.Execute(ctx, func(context.Context) error { <-release; return fail })
		}()
		time.Sleep(time.Millisecond)
		st.fail.Store(true)
		b.cb.mu.Lock() // another call holds the lock
		close(st.gate) // the flush fails
		// down is set under the lock since review141: wait for it 2 ms at most.
		for wait := time.Now(); !b.fleet.down.Load() && time.Since(wait) < 2*time.Millisecond; {
			time.Sleep(10 * time.Microsecond)
		}
		time.Sleep(200 * time.Microsecond) // the flusher waits for the lock in forget
		close(release)                     // the call's failure comes as the lock is let go: it may barge ahead of the flusher
		for range trial % 8 {
			runtime.Gosched()
		}
		b.cb.mu.Unlock()
		<-done
		if b.cb.State() == resilience.StateOpen {
			opened++
		}
		st.fail.Store(false)
		_ = b.Close()
	}
	// After going alone, this replica counted one failure (and the run
	// before it, one success): a local breaker does not open on it.
	if opened > 0 {
		t.Errorf("%d of %d trials: one failure as the replica went alone opened its breaker", opened, trials)
	}
}
