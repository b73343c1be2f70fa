package registry_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/registry"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// WaitWhenOpen with hedging: calls that waited, hedged once let through;
// each call counts once, as one success or failure.
func TestR124WaitOpenHedged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := registry.New()
		b := breaker.New("b", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(time.Second))
		p, err := r.AddPipeline(pipeline.New(pipeline.WithName("p"), pipeline.WithBreaker(b), pipeline.WaitWhenOpen(),
			pipeline.WithTimeBudget(time.Minute),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond))),
			pipeline.WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxShare(1), hedge.MaxExtra(2)))))
		if err != nil {
			t.Fatal(err)
		}
		var down atomic.Bool
		down.Store(true)
		op := func(ctx context.Context) (int, error) {
			if down.Load() {
				return 0, r124Err
			}
			select {
			case <-time.After(30 * time.Millisecond):
				return 1, nil
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}
		if _, err := pipeline.Do(context.Background(), p, op); err == nil {
			t.Fatal("want failure")
		}
		const n = 20
		var wg sync.WaitGroup
		var fails atomic.Int32
		for range n {
			wg.Go(func() {
				if _, err := pipeline.Do(context.Background(), p, op); err != nil {
					fails.Add(1)
					t.Log(err)
				}
			})
		}
		time.Sleep(500 * time.Millisecond)
		down.Store(false)
		wg.Wait()
		time.Sleep(2 * time.Second)
		synctest.Wait()
		s := r95State(t, r, p, "p")
		t.Logf("%+v", s)
		if fails.Load() != 0 {
			t.Errorf("%d calls failed", fails.Load())
		}
		if s.Calls != n+1 || s.Successes != n || s.Failures != 1 {
			t.Errorf("Calls %d Successes %d Failures %d", s.Calls, s.Successes, s.Failures)
		}
		if s.Waited != n {
			t.Errorf("Waited %d, want %d", s.Waited, n)
		}
		if s.Waiting != 0 || s.InFlight != 0 {
			t.Errorf("Waiting %d InFlight %d", s.Waiting, s.InFlight)
		}
	})
}
