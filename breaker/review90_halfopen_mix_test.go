package breaker_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// Half-open with probes that end excluded (panic, Goexit, caller cancel,
// caller's short deadline): never more than HalfOpenRequests run at once,
// and the breaker keeps admitting (never stuck).
func TestReview90HalfOpenExcludedMix(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 2
		b := breaker.New("mix", breaker.HalfOpenRequests(n), breaker.OpenTimeout(time.Second))
		for i := 0; i < 5; i++ {
			_ = b.Execute(context.Background(), func(context.Context) error { return errors.New("x") })
		}
		time.Sleep(2 * time.Second)
		var in, maxIn, ran atomic.Int32
		var wg sync.WaitGroup
		for g := 0; g < 40; g++ {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(g), 9))
				for i := 0; i < 50; i++ {
					k := rng.IntN(4)
					d := time.Duration(rng.IntN(20)) * time.Millisecond
					ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
					done := make(chan struct{})
					go func() {
						defer close(done)
						defer func() { _ = recover() }()
						_ = b.Execute(ctx, func(ctx context.Context) error {
							ran.Add(1)
							v := in.Add(1)
							defer in.Add(-1)
							for m := maxIn.Load(); v > m && !maxIn.CompareAndSwap(m, v); m = maxIn.Load() {
							}
							time.Sleep(d)
							switch k {
							case 0:
								panic("p")
							case 1:
								runtime.Goexit()
							case 2:
								cancel()
								return ctx.Err()
							default:
								<-ctx.Done()
								return ctx.Err()
							}
							return nil
						})
					}()
					<-done
					cancel()
					time.Sleep(time.Millisecond)
				}
			})
		}
		wg.Wait()
		t.Logf("ran %d, max at once %d, state %v, counts %+v", ran.Load(), maxIn.Load(), b.State(), b.Counts())
		if maxIn.Load() > n {
			t.Errorf("%d probes at once, want at most %d", maxIn.Load(), n)
		}
		if b.State() != resilience.StateHalfOpen {
			t.Errorf("state %v", b.State())
		}
		if err := b.Execute(context.Background(), func(context.Context) error { return nil }); err != nil {
			t.Errorf("stuck: %v", err)
		}
	})
}
