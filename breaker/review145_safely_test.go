package breaker_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// r145Chaos is a store each of whose methods, at random, panics, calls
// runtime.Goexit, hangs ignoring ctx until released, answers just after
// its deadline, calls back into the breaker, or answers. Its answers
// move the fleet between states and generations.
type r145Chaos struct {
	release chan struct{} // closed: hanging calls return
	b       atomic.Pointer[breaker.Breaker]
	gen     atomic.Uint64
	calls   atomic.Int64
	reenter bool
}

func (s *r145Chaos) misbehave(ctx context.Context) error {
	s.calls.Add(1)
	switch rand.IntN(9) {
	case 0:
		panic("chaos")
	case 1:
		runtime.Goexit()
	case 2:
		<-s.release // ignores ctx
		return nil
	case 3:
		if dl, ok := ctx.Deadline(); ok {
			time.Sleep(time.Until(dl) + time.Millisecond) // success, just too late
		}
		return nil
	case 4:
		return errors.New("chaos")
	case 5:
		if b := s.b.Load(); b != nil && s.reenter {
			switch rand.IntN(4) {
			case 0:
				_ = b.SetMode(ctx, breaker.Mode(rand.IntN(4)), "store")
			case 1:
				_, _ = b.Fleet(ctx)
			case 2:
				_ = b.Execute(ctx, func(context.Context) error { return nil })
			case 3:
				_ = b.Close()
			}
		}
	}
	return nil
}

func (s *r145Chaos) fleet() breaker.Fleet {
	g := s.gen.Add(uint64(rand.IntN(2)))
	return breaker.Fleet{State: resilience.State(g % 3), Generation: g, ProbeGranted: rand.IntN(2) == 0,
		ForceVersion: uint64(rand.IntN(3))}
}

func (s *r145Chaos) Sync(ctx context.Context, name string, _ breaker.Sync) (breaker.Fleet, error) {
	if err := s.misbehave(ctx); err != nil {
		return breaker.Fleet{}, err
	}
	return s.fleet(), nil
}

func (s *r145Chaos) Watch(ctx context.Context, name string, changed func(breaker.Fleet)) error {
	for range 3 {
		if err := s.misbehave(ctx); err != nil {
			return err
		}
		changed(s.fleet())
	}
	<-ctx.Done()
	return ctx.Err()
}

func (s *r145Chaos) Read(ctx context.Context, name string, _ breaker.FleetPolicy) (breaker.FleetStatus, error) {
	return breaker.FleetStatus{}, s.misbehave(ctx)
}

func (s *r145Chaos) Force(ctx context.Context, name string, f breaker.Forcing, after uint64) error {
	return s.misbehave(ctx)
}

func (s *r145Chaos) Restore(ctx context.Context, name string, f breaker.Forcing, v uint64) error {
	return s.misbehave(ctx)
}

func (s *r145Chaos) Forced(ctx context.Context, name string) (breaker.Forcing, uint64, error) {
	return breaker.Forcing{Mode: breaker.Mode(rand.IntN(4)), By: "x"}, uint64(rand.IntN(3)), s.misbehave(ctx)
}

// No crash, Close bounded by about two flush intervals, SetMode by its
// ctx and 2 s (its store write; a mode another SetMode or the flusher
// writes is review145_setmode's), and, once the hanging calls return,
// no goroutine left: many breakers, a 5 ms flush interval, a store that
// panics, exits, hangs, answers late and calls back into the breaker.
func TestReview145ChaosStoreManyBreakers(t *testing.T) {
	for _, reenter := range []bool{false, true} {
		name := "plain"
		if reenter {
			name = "reentrant"
		}
		t.Run(name, func(t *testing.T) {
			s := &r145Chaos{release: make(chan struct{}), reenter: reenter}
			const every = 5 * time.Millisecond
			var bs []*breaker.Breaker
			for range 12 {
				b := breaker.New("dep", breaker.Shared(s), breaker.FailureRate(0.5, 5), breaker.Window(time.Second, 10),
					breaker.OpenTimeout(20*time.Millisecond), breaker.FlushInterval(every))
				s.b.Store(b)
				bs = append(bs, b)
			}
			var wg sync.WaitGroup
			stop := make(chan struct{})
			for _, b := range bs {
				wg.Go(func() {
					for {
						select {
						case <-stop:
							return
						default:
						}
						ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
						_ = b.Execute(ctx, func(context.Context) error {
							if rand.IntN(3) == 0 {
								return errors.New("fail")
							}
							return nil
						})
						_ = b.State()
						_ = b.Check()
						_ = b.FleetState()
						if rand.IntN(50) == 0 {
							_, _ = b.Fleet(ctx)
						}
						cancel()
						time.Sleep(100 * time.Microsecond)
					}
				})
			}
			time.Sleep(800 * time.Millisecond)
			close(stop)
			wg.Wait()
			for _, b := range bs {
				start := time.Now()
				_ = b.Close()
				if d := time.Since(start); d > 2*every+20*time.Millisecond {
					t.Errorf("Close took %v, more than two flush intervals (%v)", d, 2*every)
				}
			}
			close(s.release)
			if s.calls.Load() < 100 {
				t.Fatalf("only %d store calls", s.calls.Load())
			}
			goleak.VerifyNone(t, goleak.IgnoreCurrent())
		})
	}
}

// A well-behaved store (it honours ctx) that is slow: every call waits
// for its ctx to end. Once every breaker is closed, no goroutine is left.
type r145Slow struct{}

func (r145Slow) Sync(ctx context.Context, name string, _ breaker.Sync) (breaker.Fleet, error) {
	<-ctx.Done()
	return breaker.Fleet{}, ctx.Err()
}
func (r145Slow) Watch(ctx context.Context, name string, changed func(breaker.Fleet)) error {
	<-ctx.Done()
	return ctx.Err()
}
func (r145Slow) Read(ctx context.Context, name string, _ breaker.FleetPolicy) (breaker.FleetStatus, error) {
	<-ctx.Done()
	return breaker.FleetStatus{}, ctx.Err()
}
func (r145Slow) Force(ctx context.Context, name string, f breaker.Forcing, after uint64) error {
	<-ctx.Done()
	return ctx.Err()
}
func (r145Slow) Restore(ctx context.Context, name string, f breaker.Forcing, v uint64) error {
	<-ctx.Done()
	return ctx.Err()
}
func (r145Slow) Forced(ctx context.Context, name string) (breaker.Forcing, uint64, error) {
	<-ctx.Done()
	return breaker.Forcing{}, 0, ctx.Err()
}

func TestReview145NoGoroutineLeftByAWellBehavedSlowStore(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var bs []*breaker.Breaker
	for range 10 {
		bs = append(bs, breaker.New("dep", breaker.Shared(r145Slow{}), breaker.FailureRate(0.5, 5),
			breaker.Window(time.Second, 10), breaker.FlushInterval(10*time.Millisecond)))
	}
	var wg sync.WaitGroup
	for _, b := range bs {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
			defer cancel()
			_ = b.SetMode(ctx, breaker.ForcedClosed, "me")
			_, _ = b.Fleet(ctx)
			_ = b.Execute(ctx, func(context.Context) error { return nil })
		})
	}
	wg.Wait()
	time.Sleep(50 * time.Millisecond)
	for _, b := range bs {
		start := time.Now()
		_ = b.Close()
		if d := time.Since(start); d > 40*time.Millisecond {
			t.Errorf("Close took %v", d)
		}
	}
}
