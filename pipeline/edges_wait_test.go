package pipeline

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/limit"
)

// With WaitWhenOpen and WithLimit, an attempt of a call that waited takes
// its WithLimit slot first and then queues in the pacer, sending nothing:
// the queued attempts hold slots of the user's limit, and a call that
// never waited is refused (or queued) by a limit that the dependency's
// load does not reach.
func TestPacerQueueHoldsUserLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("dep", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(time.Second))
		user := limit.NewFixed(25)
		p := New(WithBreaker(b), WaitWhenOpen(), WithLimit(user), WithTimeBudget(10*time.Second))

		var fail, probed atomic.Bool
		var inflight atomic.Int32
		release := make(chan struct{})
		op := func(ctx context.Context) (int, error) {
			if fail.Load() {
				return 0, errors.New("boom")
			}
			if probed.CompareAndSwap(false, true) {
				return 1, nil // the probe closes the breaker
			}
			inflight.Add(1)
			defer inflight.Add(-1)
			select {
			case <-release:
			case <-ctx.Done():
			}
			return 1, nil
		}
		fail.Store(true)
		Do(context.Background(), p, op)
		fail.Store(false)
		if b.Check() == nil {
			t.Fatal("breaker not open")
		}
		var wg sync.WaitGroup
		for range 40 {
			wg.Go(func() { Do(context.Background(), p, op) })
		}
		time.Sleep(1500 * time.Millisecond)
		synctest.Wait()
		t.Logf("at the dependency: %d in flight; user limiter: %d in flight; pacer limit %d waiting %d",
			inflight.Load(), user.InFlight(), p.cfg.pacer.limit.Limit(), p.cfg.pacer.limit.Waiting())
		// A call that never waited, the breaker closed, the dependency at 20 of 25.
		_, err := Do(context.Background(), p, func(ctx context.Context) (int, error) { return 1, nil })
		if err != nil {
			t.Errorf("a fresh call while the dependency has %d of 25 in flight: %v", inflight.Load(), err)
		}
		close(release)
		wg.Wait()
	})
}
