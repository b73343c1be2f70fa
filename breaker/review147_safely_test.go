package breaker_test

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// hang147 is a store whose methods ignore their context once hang is set:
// they return only when the test releases them (or never panic/Goexit per
// mode).
type hang147 struct {
	release chan struct{}
	mode    atomic.Int32 // 0 answer, 1 hang, 2 panic, 3 Goexit
	syncs   atomic.Int64
	forces  atomic.Int64
}

func (s *hang147) act() {
	switch s.mode.Load() {
	case 1:
		<-s.release
	case 2:
		panic("store bug")
	case 3:
		runtime.Goexit()
	}
}

func (s *hang147) Sync(ctx context.Context, name string, sy breaker.Sync) (breaker.Fleet, error) {
	s.syncs.Add(1)
	s.act()
	return breaker.Fleet{State: resilience.StateClosed, Generation: 7}, nil
}

func (s *hang147) Watch(ctx context.Context, name string, changed func(breaker.Fleet)) error {
	if s.mode.Load() == 1 {
		<-s.release
		return nil
	}
	<-ctx.Done()
	return ctx.Err()
}

func (s *hang147) Force(ctx context.Context, name string, f breaker.Forcing, after uint64) error {
	s.forces.Add(1)
	s.act()
	return nil
}

func (s *hang147) Restore(ctx context.Context, name string, f breaker.Forcing, version uint64) error {
	s.act()
	return nil
}

func (s *hang147) Forced(ctx context.Context, name string) (breaker.Forcing, uint64, error) {
	s.act()
	return breaker.Forcing{}, 0, nil
}

func newHang147(name string, s *hang147, every time.Duration) *breaker.Breaker {
	return breaker.New(name, breaker.Shared(s), breaker.FailureRate(0.5, 10),
		breaker.Window(10*time.Second, 10), breaker.OpenTimeout(time.Second),
		breaker.FlushInterval(every))
}

// TestReview147CloseBoundedHangingStore: Close takes at most two flush
// intervals whatever the store does (here: Sync, Watch and Forced ignore
// their context and never return until released), for a flush interval
// above and below storeGrace.
func TestReview147CloseBoundedHangingStore(t *testing.T) {
	for _, every := range []time.Duration{10 * time.Millisecond, 100 * time.Millisecond, time.Second} {
		for _, at := range []time.Duration{0, every / 3, every + every/2} {
			t.Run(every.String()+"/"+at.String(), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					s := &hang147{release: make(chan struct{})}
					defer close(s.release)
					b := newHang147("close-hang", s, every)
					time.Sleep(every / 2)
					s.mode.Store(1)
					time.Sleep(at)
					start := time.Now()
					_ = b.Close()
					if d := time.Since(start); d > 2*every {
						t.Errorf("Close took %v, more than two flush intervals (%v)", d, 2*every)
					}
				})
			})
		}
	}
}

// TestReview147FlusherSurvivesPanicGoexit: a panic or Goexit in Sync is that
// flush's error; the flusher goes on and shares again when Sync answers.
func TestReview147FlusherSurvivesPanicGoexit(t *testing.T) {
	for _, mode := range []int32{2, 3} {
		synctest.Test(t, func(t *testing.T) {
			s := &hang147{release: make(chan struct{})}
			var restored atomic.Int64
			b := breaker.New("goexit", breaker.Shared(s), breaker.FailureRate(0.5, 10),
				breaker.Window(10*time.Second, 10), breaker.FlushInterval(100*time.Millisecond),
				breaker.WithListener(resilience.ListenerFunc(func(e resilience.Event) {
					if e.Kind == resilience.EventSharedStateRestored {
						restored.Add(1)
					}
				})))
			defer b.Close()
			time.Sleep(50 * time.Millisecond)
			s.mode.Store(mode)
			time.Sleep(300 * time.Millisecond)
			n := s.syncs.Load()
			s.mode.Store(0)
			time.Sleep(300 * time.Millisecond)
			if s.syncs.Load() < n+2 || restored.Load() == 0 {
				t.Errorf("mode %d: flusher stopped: %d syncs before, %d after, restored %d", mode, n, s.syncs.Load(), restored.Load())
			}
		})
	}
}

// TestReview147SetModeBounded: SetMode's write is bounded by ctx and by 2 s
// (plus storeGrace, the wait after a context ended), whatever the store does;
// a second SetMode while the first's write hangs is bounded by its own ctx.
func TestReview147SetModeBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &hang147{release: make(chan struct{})}
		defer close(s.release)
		b := newHang147("setmode-hang", s, 100*time.Millisecond)
		defer b.Close()
		time.Sleep(50 * time.Millisecond)
		s.mode.Store(1)
		const grace = 100 * time.Millisecond
		var wg sync.WaitGroup
		start := time.Now()
		var d1 time.Duration
		var err1 error
		wg.Go(func() {
			err1 = b.SetMode(context.Background(), breaker.ForcedOpen, "alice")
			d1 = time.Since(start)
		})
		time.Sleep(10 * time.Millisecond)
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		s2 := time.Now()
		err2 := b.SetMode(ctx, breaker.Normal, "bob")
		d2 := time.Since(s2)
		cancel()
		wg.Wait()
		if err1 == nil || d1 > 2*time.Second+grace {
			t.Errorf("first SetMode: %v after %v (bound 2s + %v)", err1, d1, grace)
		}
		if err2 == nil || d2 > 50*time.Millisecond+grace {
			t.Errorf("second SetMode: %v after %v (bound 50ms ctx + %v)", err2, d2, grace)
		}
		if d2 > 50*time.Millisecond {
			t.Logf("second SetMode took %v with a 50ms ctx", d2)
		}
		// The replica takes the mode anyway: the later SetMode's.
		if m := b.Mode().Mode; m != breaker.Normal {
			t.Errorf("Mode %v after SetMode(Normal)", m)
		}
	})
}
