package breaker

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/resilience"
)

// rvStore flips the fleet between closed and half-open, granting a probe
// to whoever asks while half-open.
type rvStore struct {
	mu  sync.Mutex
	gen uint64
	n   int
}

func (s *rvStore) Sync(ctx context.Context, name string, in Sync) (Fleet, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	if s.n%3 == 0 {
		s.gen++
	}
	st := resilience.StateClosed
	if s.gen%2 == 1 {
		st = resilience.StateHalfOpen
	}
	return Fleet{State: st, Generation: s.gen, ProbeGranted: st == resilience.StateHalfOpen && (in.WantProbe || in.ProbeHeld || in.ProbeRunning)}, nil
}

// Shared breaker, calls that panic, Goexit, cancel: the probe accounting
// (running) goes back to 0, no deadlock, no race.
func TestReviewSharedPanicsGoexits(t *testing.T) {
	b := New("shared", Shared(&rvStore{}), FailureRate(0.5, 10), Window(50*time.Millisecond, 5),
		ConsecutiveFailures(4), OpenTimeout(2*time.Millisecond), FlushInterval(3*time.Millisecond), HalfOpenRequests(2))
	defer b.Close()
	var wg sync.WaitGroup
	var probes atomic.Int64
	deadline := time.Now().Add(400 * time.Millisecond)
	for g := range 32 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 3))
			for time.Now().Before(deadline) {
				k := r.IntN(12)
				done := make(chan struct{})
				go func() {
					defer close(done)
					defer func() { _ = recover() }()
					_ = b.Execute(context.Background(), func(ctx context.Context) error {
						if b.fleet.running.Load() > 0 {
							probes.Add(1)
						}
						time.Sleep(time.Duration(r.IntN(300)) * time.Microsecond)
						switch k {
						case 0:
							panic("p")
						case 1:
							runtime.Goexit()
						case 2:
							return context.Canceled
						case 3, 4, 5:
							return errors.New("f")
						}
						return nil
					})
				}()
				<-done
			}
		})
	}
	wg.Wait()
	if n := b.fleet.running.Load(); n != 0 {
		t.Errorf("running %d after every call ended", n)
	}
	t.Logf("calls seen with a probe running: %d; own state %v, fleet %v, permits %d", probes.Load(), b.cb.State(), b.fleet.view(), b.fleet.permits.Load())
}
