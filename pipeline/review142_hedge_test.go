package pipeline_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// A slow EventHedged listener, first attempts failing (not retried: no
// retry stage) around the hedge delay, hedges succeeding or failing: every
// call whose hedge's operation ran says Hedged, no operation runs after
// its call returned, and the hedges told are never fewer than those run.
func TestReview142HedgedSaysSoAndNoLateOps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var told atomic.Int64
		lis := resilience.ListenerFunc(func(e resilience.Event) {
			if e.Kind == resilience.EventHedged {
				told.Add(1)
				time.Sleep(time.Duration(rand.IntN(4)) * time.Millisecond)
			}
		})
		p := pipeline.New(pipeline.WithHedging(hedge.New(hedge.Delay(5*time.Millisecond), hedge.MaxShare(1), hedge.MaxExtra(2))),
			pipeline.WithListener(lis))
		errBad := errors.New("400")
		var ran, late, notSaid atomic.Int64
		var wg sync.WaitGroup
		for g := 0; g < 20; g++ {
			wg.Go(func() {
				for i := 0; i < 100; i++ {
					var n atomic.Int64
					var done atomic.Bool
					_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
						k := n.Add(1)
						if done.Load() {
							late.Add(1)
						}
						if k > 1 {
							ran.Add(1)
						}
						d := time.Duration(rand.IntN(12)) * time.Millisecond
						select {
						case <-time.After(d):
						case <-ctx.Done():
							return 0, ctx.Err()
						}
						if k == 1 || rand.IntN(2) == 0 {
							return 0, errBad
						}
						return int(k), nil
					})
					done.Store(true)
					if n.Load() > 1 && err != nil && !pipeline.Hedged(err) {
						notSaid.Add(1)
					}
				}
			})
		}
		wg.Wait()
		time.Sleep(time.Second)
		if late.Load() > 0 || notSaid.Load() > 0 || told.Load() < ran.Load() {
			t.Errorf("late ops %d, hedged calls not said %d, told %d < ran %d?", late.Load(), notSaid.Load(), told.Load(), ran.Load())
		}
		t.Logf("told %d ran %d", told.Load(), ran.Load())
	})
}
