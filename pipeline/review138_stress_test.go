package pipeline_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// Real time, many goroutines on one Pipeline and Policy, two result types
// and DoStream mixed (the pipeline's spare memory of a hedged call goes
// from call to call): each caller gets its own call's result, never
// another's, and every call succeeds against a slow but healthy
// dependency.
func TestReview138SharedPipelineOwnResults(t *testing.T) {
	p := pipeline.New(
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3))),
		pipeline.WithHedging(hedge.New(hedge.Delay(300*time.Microsecond), hedge.MaxExtra(2), hedge.MaxShare(1))),
		pipeline.WithTimeBudget(2*time.Second),
	)
	lat := func() time.Duration {
		if rand.IntN(4) == 0 {
			return time.Duration(500+rand.IntN(1500)) * time.Microsecond
		}
		return time.Duration(rand.IntN(200)) * time.Microsecond
	}
	wait := func(ctx context.Context) error {
		d := lat()
		if d < 50*time.Microsecond {
			return nil // answers at once, without watching ctx
		}
		select {
		case <-time.After(d):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	var wrong, failed atomic.Int64
	var id atomic.Int64
	deadline := time.Now().Add(1500 * time.Millisecond)
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				me := id.Add(1)
				switch g % 3 {
				case 0:
					got, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int64, error) {
						return me, wait(ctx)
					})
					if err != nil {
						failed.Add(1)
					} else if got != me {
						wrong.Add(1)
					}
				case 1:
					want := fmt.Sprint(me)
					got, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (string, error) {
						return want, wait(ctx)
					})
					if err != nil {
						failed.Add(1)
					} else if got != want {
						wrong.Add(1)
					}
				case 2:
					got, release, err := pipeline.DoStream(context.Background(), p, func(ctx context.Context) (*int64, error) {
						v := me
						return &v, wait(ctx)
					})
					if err != nil {
						failed.Add(1)
					} else if *got != me {
						wrong.Add(1)
					}
					release()
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d calls", id.Load())
	if wrong.Load() != 0 || failed.Load() != 0 {
		t.Errorf("%d calls got another's result, %d failed", wrong.Load(), failed.Load())
	}
}
