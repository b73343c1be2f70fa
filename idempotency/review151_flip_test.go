package idempotency

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/resilience"
)

// (a): a store that flips between refusing writes (reading) and healthy,
// under concurrent requests, some repeats: on one guard no key runs twice
// (the store never loses a record, the guard keeps what ran locally).
func TestReview151FlipRefuseHealthyNoKeyTwice(t *testing.T) {
	for seed := range uint64(3) {
		synctest.Test(t, func(t *testing.T) {
			s := newR151Store()
			ev := &r151Events{}
			g := r151Guard(s, ev, FailOpenAfter(500*time.Millisecond))
			var mu sync.Mutex
			runs := map[string]int{}
			stop := make(chan struct{})
			go func() {
				rng := rand.New(rand.NewPCG(seed, 1))
				for {
					select {
					case <-stop:
						s.mode.Store(r151Healthy)
						return
					case <-time.After(time.Duration(100+rng.IntN(900)) * time.Millisecond):
					}
					if s.mode.Load() == r151Healthy {
						s.mode.Store(r151Refuse)
					} else {
						s.mode.Store(r151Healthy)
					}
				}
			}()
			var wg sync.WaitGroup
			for w := range 16 {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(seed, uint64(w)+10))
					for range 300 {
						k := fmt.Sprint("k", rng.IntN(3000))
						c, _, err := g.Begin(context.Background(), "s", k, "fp")
						if err == nil && c != nil {
							mu.Lock()
							runs[k]++
							mu.Unlock()
							time.Sleep(time.Duration(rng.IntN(50)) * time.Millisecond)
							_ = c.Complete(context.Background(), Record{Status: 201})
						}
						time.Sleep(time.Duration(rng.IntN(40)) * time.Millisecond)
					}
				})
			}
			wg.Wait()
			close(stop)
			time.Sleep(2 * time.Minute)
			if ev.count(resilience.EventSharedStateUnavailable) == 0 {
				t.Logf("seed %d: never failed open (no coverage of the open path)", seed)
			}
			t.Logf("seed %d: %d keys ran, events %v", seed, len(runs), ev.n)
			for k, n := range runs {
				if n > 1 {
					t.Errorf("seed %d: key %s ran %d times", seed, k, n)
				}
			}
		})
	}
}
