package breaker_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// slowStore52 is memStore with a fixed latency per Sync and a log of when
// each Sync started.
type slowStore52 struct {
	*memStore
	lat  time.Duration
	mu   sync.Mutex
	at   []time.Time
	hang atomic.Bool
}

func (s *slowStore52) Sync(ctx context.Context, name string, in breaker.Sync) (breaker.Fleet, error) {
	s.mu.Lock()
	s.at = append(s.at, time.Now())
	s.mu.Unlock()
	if s.hang.Load() {
		<-ctx.Done()
		return breaker.Fleet{}, ctx.Err()
	}
	select {
	case <-time.After(s.lat):
	case <-ctx.Done():
		return breaker.Fleet{}, ctx.Err()
	}
	return s.memStore.Sync(ctx, name, in)
}

func (s *slowStore52) since(t time.Time) []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []time.Duration
	for _, a := range s.at {
		if !a.Before(t) {
			out = append(out, a.Sub(t))
		}
	}
	return out
}

var errDep52 = errors.New("dependency down")

func open52(t *testing.T, b *breaker.Breaker) {
	for range 20 {
		_ = b.Execute(context.Background(), func(context.Context) error { return errDep52 })
	}
	for i := 0; i < 50 && b.FleetState() != resilience.StateOpen; i++ {
		time.Sleep(100 * time.Millisecond)
	}
	if b.FleetState() != resilience.StateOpen {
		t.Fatalf("fleet not open: %v", b.FleetState())
	}
}

// A burst of concurrent calls after a quiet spell, at a half-open fleet:
// only one call should wait for the store; the others are rejected at once;
// and at most one extra flush.
func TestReview52_BurstAfterQuietWaitsOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const every = 100 * time.Millisecond
		st := &slowStore52{memStore: newMemStore(), lat: 20 * time.Millisecond}
		b := breaker.New("burst", breaker.Shared(st), breaker.FlushInterval(every),
			breaker.FailureRate(0.5, 5), breaker.ConsecutiveFailures(1000),
			breaker.OpenTimeout(time.Second), breaker.HalfOpenRequests(1))
		defer b.Close()
		open52(t, b)
		time.Sleep(3*time.Second + 50*time.Millisecond) // quiet; fleet half-open by now
		synctest.Wait()
		if s := b.FleetState(); s != resilience.StateHalfOpen {
			t.Logf("fleet state %v", s)
		}
		start := time.Now()
		const n = 64
		var waited, probes, rejected atomic.Int64
		var wg sync.WaitGroup
		gate := make(chan struct{})
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-gate
				t0 := time.Now()
				err := b.Execute(context.Background(), func(context.Context) error {
					probes.Add(1)
					return nil
				})
				if err != nil {
					rejected.Add(1)
					if time.Since(t0) > 0 {
						waited.Add(1)
					}
				}
			}()
		}
		close(gate)
		wg.Wait()
		extra := st.since(start)
		t.Logf("syncs in the 400ms before: %v", st.since(start.Add(-400*time.Millisecond)))
		t.Logf("probes=%d rejected=%d rejected-after-waiting=%d syncs-started-within-50ms=%v", probes.Load(), rejected.Load(), waited.Load(), extra)
		if probes.Load() != 1 {
			t.Errorf("probes = %d, want 1", probes.Load())
		}
		if waited.Load() > 0 {
			t.Errorf("%d rejected calls waited instead of being rejected at once", waited.Load())
		}
		kicked := 0
		for _, d := range extra {
			if d < 50*time.Millisecond {
				kicked++
			}
		}
		if kicked > 1 {
			t.Errorf("%d flushes started within 50ms of the burst (one extra allowed)", kicked)
		}
	})
}

// Calls rarer than flushes (every 2.5 and every 1.5 intervals) after an
// outage: the fleet must close.
func TestReview52_RareCallsClose(t *testing.T) {
	for _, gap := range []time.Duration{150 * time.Millisecond, 201 * time.Millisecond, 250 * time.Millisecond, 1 * time.Second} {
		for _, hor := range []uint32{1, 3} {
			t.Run(gap.String()+"/"+string(rune('0'+hor)), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					st := &slowStore52{memStore: newMemStore(), lat: 5 * time.Millisecond}
					b := breaker.New("rare", breaker.Shared(st), breaker.FlushInterval(100*time.Millisecond),
						breaker.FailureRate(0.5, 5), breaker.ConsecutiveFailures(1000),
						breaker.OpenTimeout(time.Second), breaker.HalfOpenRequests(hor))
					defer b.Close()
					open52(t, b)
					ok := 0
					for i := 0; i < 100; i++ {
						time.Sleep(gap)
						if b.Execute(context.Background(), func(context.Context) error { return nil }) == nil {
							ok++
						}
						if b.FleetState() == resilience.StateClosed && ok > 0 {
							break
						}
					}
					time.Sleep(500 * time.Millisecond)
					if s := b.FleetState(); s != resilience.StateClosed {
						t.Errorf("gap %v hor %d: fleet %v after 100 rare calls (%d admitted)", gap, hor, s, ok)
					}
				})
			})
		}
	}
}

// Close while rare calls wait in flushNow on a hanging store: bounded.
func TestReview52_CloseWithWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const every = 100 * time.Millisecond
		st := &slowStore52{memStore: newMemStore(), lat: 5 * time.Millisecond}
		b := breaker.New("close", breaker.Shared(st), breaker.FlushInterval(every),
			breaker.FailureRate(0.5, 5), breaker.ConsecutiveFailures(1000),
			breaker.OpenTimeout(time.Second), breaker.HalfOpenRequests(1))
		open52(t, b)
		time.Sleep(3 * time.Second)
		st.hang.Store(true)
		var wg sync.WaitGroup
		var took atomic.Int64
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				t0 := time.Now()
				_ = b.Execute(context.Background(), func(context.Context) error { return nil })
				if d := int64(time.Since(t0)); d > took.Load() {
					took.Store(d)
				}
			}()
		}
		time.Sleep(10 * time.Millisecond)
		t0 := time.Now()
		_ = b.Close()
		if d := time.Since(t0); d > 2*every+time.Millisecond {
			t.Errorf("Close took %v", d)
		}
		wg.Wait()
		if d := time.Duration(took.Load()); d > 2*every+10*time.Millisecond {
			t.Errorf("a call waited %v", d)
		}
		t.Logf("longest call %v", time.Duration(took.Load()))
	})
}
