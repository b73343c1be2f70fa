package idempotency_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/idempotency"
)

// A handler ten leases long, repeats from 3 replicas × 20 goroutines
// every 50 ms, and a caller that gives up (its context canceled) at each
// step: one run, every repeat 409 then the replay, never another run.
func TestReview165HandlerTenLeasesLongRunsOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const lease, st = time.Second, 100 * time.Millisecond
		store := idempotency.NewMemoryStore(0)
		var guards []*idempotency.Guard
		for range 3 {
			guards = append(guards, idempotency.NewGuard(store, idempotency.Lease(lease), idempotency.StoreTimeout(st)))
		}
		var runs atomic.Int32
		var replays, other atomic.Int32
		var wg sync.WaitGroup
		for i := range 60 {
			g := guards[i%3]
			wg.Go(func() {
				for range 400 {
					ctx, cancel := context.WithTimeout(context.Background(), time.Duration(i%5)*10*time.Millisecond+time.Millisecond)
					claim, rec, err := g.Begin(ctx, "s", "k", "fp")
					cancel()
					switch {
					case claim != nil:
						runs.Add(1)
						time.Sleep(10 * lease)
						_ = claim.Complete(context.Background(), idempotency.Record{Status: 201, Body: []byte("one")})
						return
					case rec != nil:
						if string(rec.Body) != "one" {
							other.Add(1)
						}
						replays.Add(1)
						return
					case errors.Is(err, idempotency.ErrInProgress), errors.Is(err, context.DeadlineExceeded):
					default:
						other.Add(1)
						t.Logf("Begin: %v", err)
					}
					time.Sleep(50 * time.Millisecond)
				}
			})
		}
		wg.Wait()
		if runs.Load() != 1 || replays.Load() != 59 || other.Load() != 0 {
			t.Errorf("runs %d, replays %d, other %d", runs.Load(), replays.Load(), other.Load())
		}
	})
}
