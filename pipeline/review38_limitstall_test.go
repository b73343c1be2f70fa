package pipeline_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
)

// TestReview38LimitQueueAfterAStall runs a pipeline with a bulkhead of 50
// that queues (pipeline.WithLimit(limit.NewFixed(50, limit.MaxWaiting))),
// in front of a dependency answering in 40 to 60 ms (1,000 a second): a
// burst of 150 calls then a stream at 970 a second for 2 s, each with a
// 1 s deadline; at 500 ms the dependency stalls for 200 ms (nothing
// answers). First come first served, no call waits more than about
// 350 ms: every call can be answered in time, and a plain client without
// the bulkhead answers them all. It holds the bulkhead to failing at most
// 10 of them: the former rule (adaptive LIFO) failed 0 here; the
// Little's-law estimate of review 38 failed 256.
func TestReview38LimitQueueAfterAStall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := limit.NewFixed(50, limit.MaxWaiting(1<<20), limit.OldestOnTime())
		p := pipeline.New(pipeline.WithLimit(l))
		start := time.Now()
		blipFrom, blipTo := start.Add(500*time.Millisecond), start.Add(700*time.Millisecond)
		var mu sync.Mutex
		rng := rand.New(rand.NewPCG(1, 38))
		op := func(ctx context.Context) (int, error) {
			mu.Lock()
			d := 40*time.Millisecond + time.Duration(rng.Int64N(int64(20*time.Millisecond)+1))
			mu.Unlock()
			end := time.Now().Add(d)
			if !end.Before(blipFrom) && end.Before(blipTo) {
				end = blipTo
			}
			tm := time.NewTimer(time.Until(end))
			defer tm.Stop()
			select {
			case <-tm.C:
				return 1, nil
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}
		var ok, failed atomic.Int64
		var wg sync.WaitGroup
		call := func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			if _, err := pipeline.Do(ctx, p, op); err != nil {
				failed.Add(1)
			} else {
				ok.Add(1)
			}
		}
		for range 150 {
			wg.Go(call)
		}
		for i := 1; i <= 1940; i++ {
			time.Sleep(start.Add(time.Duration(i) * time.Second / 970).Sub(time.Now()))
			wg.Go(call)
		}
		wg.Wait()
		const formerFailed = 0
		t.Logf("%d ok, %d failed (the former rule: %d failed)", ok.Load(), failed.Load(), formerFailed)
		assert.LessOrEqual(t, failed.Load(), int64(formerFailed+10), "calls a plain client would have completed failed in the bulkhead's queue")
	})
}
