package limit_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/limit"
)

// Extras (hedges) stopped by attempts that find the limit full, an
// adaptive limit falling meanwhile, MaxWaiting small, callers giving up:
// no panic (a channel closed twice), every slot back, in flight never
// above the highest limit, and every extra stopped at most once.
func TestReview160HeirsChurn(t *testing.T) {
	for seed := range 4 {
		synctest.Test(t, func(t *testing.T) {
			l := limit.NewAIMD(limit.Initial(8), limit.Max(8), limit.Min(1), limit.Backoff(0.5), limit.MaxWaiting(seed))
			var in, most atomic.Int64
			var wg sync.WaitGroup
			for i := range 1500 {
				wg.Go(func() {
					time.Sleep(time.Duration((i*13+seed)%200) * time.Millisecond)
					var tk limit.Ticket
					var err error
					var stopped atomic.Int32
					ctx, cancel := context.WithTimeout(context.Background(), time.Duration(1+i%6)*time.Millisecond)
					defer cancel()
					if i%3 == 0 {
						tk, err = l.AcquireExtra(func() {
							if stopped.Add(1) > 1 {
								t.Errorf("extra stopped twice")
							}
							cancel()
						})
					} else {
						tk, err = l.Acquire(ctx)
					}
					if err != nil {
						return
					}
					n := in.Add(1)
					for {
						m := most.Load()
						if n <= m || most.CompareAndSwap(m, n) {
							break
						}
					}
					select {
					case <-time.After(time.Duration(i%4) * time.Millisecond):
					case <-ctx.Done():
					}
					in.Add(-1)
					var outcome error
					if i%5 == 0 {
						outcome = errR160
					} else if ctx.Err() != nil {
						outcome = ctx.Err()
					}
					l.Release(tk, outcome)
				})
			}
			wg.Wait()
			if most.Load() > 8 {
				t.Errorf("%d in flight, highest limit 8", most.Load())
			}
			if l.InFlight() != 0 || l.Waiting() != 0 {
				t.Errorf("in flight %d waiting %d", l.InFlight(), l.Waiting())
			}
		})
	}
}
