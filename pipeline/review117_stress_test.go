package pipeline_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// Panics, runtime.Goexit, cancellations, failures and hedges at once,
// through a fixed limit with a queue: never more than the limit in flight,
// nothing held or waiting at the end, every loser's result discarded once,
// no goroutine left.
func TestReview117StressHedgesLimitPanics(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	const n = 4
	lim := limit.NewFixed(n, limit.MaxWaiting(20))
	p := pipeline.New(pipeline.WithLimit(lim),
		pipeline.WithBreaker(breaker.New("r117s", breaker.ConsecutiveFailures(1000000))),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(100*time.Microsecond))),
		pipeline.WithTimeBudget(30*time.Millisecond),
		pipeline.WithHedging(hedge.New(hedge.Delay(300*time.Microsecond), hedge.MaxExtra(3), hedge.MaxShare(1))))
	var inOp, maxIn atomic.Int64
	var made, returned, discarded atomic.Int64
	var ids atomic.Int64
	var seenMu sync.Mutex
	seen := map[int64]string{}
	mark := func(id int64, how string) {
		if id == 0 {
			return
		}
		seenMu.Lock()
		defer seenMu.Unlock()
		if prev, ok := seen[id]; ok {
			t.Errorf("result %d %s, already %s", id, how, prev)
		}
		seen[id] = how
	}
	var wg sync.WaitGroup
	type res struct{ id int64 }
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for range 150 {
				kind := rng.IntN(10)
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(1+rng.IntN(20))*time.Millisecond)
				done := make(chan struct{})
				go func() {
					defer close(done)
					defer func() { recover() }()
					r, err := pipeline.Do(ctx, p, func(ctx context.Context) (*res, error) {
						v := inOp.Add(1)
						defer inOp.Add(-1)
						for {
							m := maxIn.Load()
							if v <= m || maxIn.CompareAndSwap(m, v) {
								break
							}
						}
						made.Add(1)
						d := time.Duration(rand.IntN(2000)) * time.Microsecond
						select {
						case <-time.After(d):
						case <-ctx.Done():
							return &res{id: ids.Add(1)}, ctx.Err()
						}
						switch kind {
						case 0:
							panic("boom")
						case 1:
							runtime.Goexit()
						case 2, 3:
							return &res{id: ids.Add(1)}, errors.New("503")
						}
						return &res{id: ids.Add(1)}, nil
					}, pipeline.Discard(func(r *res) {
						discarded.Add(1)
						if r != nil {
							mark(r.id, "discarded")
						}
					}))
					if r != nil {
						returned.Add(1)
						mark(r.id, "returned")
					}
					_ = err
				}()
				<-done
				cancel()
			}
		}()
	}
	wg.Wait()
	deadline := time.Now().Add(2 * time.Second)
	for lim.InFlight() != 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if m := maxIn.Load(); m > n {
		t.Errorf("%d operations ran at once, limit %d", m, n)
	}
	if lim.InFlight() != 0 || lim.Waiting() != 0 {
		t.Errorf("at the end: InFlight %d Waiting %d", lim.InFlight(), lim.Waiting())
	}
	t.Logf("ops %d, returned %d, discarded %d", made.Load(), returned.Load(), discarded.Load())
}
