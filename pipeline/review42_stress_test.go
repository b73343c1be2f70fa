package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// Thousands of hedged calls whose attempts succeed, fail (retryable or
// not), panic, Goexit or ignore cancellation, at random. Every result an
// attempt returned with success or an error not retried is either the
// call's or given to Discard, exactly once (a result with an error that
// may be retried is the operation's to release: Discard's doc);
// a panic reaches the caller only if an attempt panicked; no goroutine is
// left.
func TestReview42HedgeStress(t *testing.T) {
	for _, retries := range []int{1, 3} {
		t.Run(fmt.Sprint("attempts", retries), func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			var nextID atomic.Int64
			var produced, returned, discarded sync.Map
			var nProduced, nAccounted, dup atomic.Int64
			p := pipeline.New(
				pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(retries), retrypolicy.BaseDelay(time.Millisecond))),
				pipeline.WithHedging(hedge.New(hedge.Delay(2*time.Millisecond), hedge.MaxExtra(3), hedge.MaxShare(1))))
			const calls = 2000
			var wg sync.WaitGroup
			var callErr sync.Map
			var panics, goexits, unexpected atomic.Int64
			for i := range calls {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(i), 7))
					var rmu sync.Mutex
					roll := func() (int, time.Duration) {
						rmu.Lock()
						defer rmu.Unlock()
						return rng.IntN(100), time.Duration(rng.IntN(8)) * time.Millisecond
					}
					var anyPanic atomic.Bool
					done := make(chan struct{})
					go func() {
						defer close(done)
						completed := false
						defer func() {
							r := recover()
							switch {
							case r != nil:
								panics.Add(1)
								if !anyPanic.Load() {
									unexpected.Add(1)
								}
							case !completed:
								goexits.Add(1)
							}
						}()
						v, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int64, error) {
							k, d := roll()
							switch {
							case k < 2:
								anyPanic.Store(true)
								panic("boom")
							case k < 4:
								runtime.Goexit()
							}
							if k < 15 {
								time.Sleep(d) // ignores ctx
							} else {
								select {
								case <-time.After(d):
								case <-ctx.Done():
								}
							}
							if k >= 30 && k < 55 {
								// A failure that may be retried: the operation
								// releases its result itself (Discard's doc).
								return 0, errors.New("transient")
							}
							id := nextID.Add(1)
							kind := "ok"
							if k < 30 {
								kind = "perm"
							}
							produced.Store(id, fmt.Sprintf("call %d %s hedge=%v ctxErr=%v", i, kind, p.IsHedge(ctx), ctx.Err()))
							nProduced.Add(1)
							if k < 30 {
								return id, resilience.Permanent(errors.New("no"))
							}
							return id, nil
						}, pipeline.Discard(func(id int64) {
							if id == 0 {
								return
							}
							if _, loaded := discarded.LoadOrStore(id, true); loaded {
								dup.Add(1)
							}
							nAccounted.Add(1)
						}))
						completed = true
						callErr.Store(i, fmt.Sprint(v, " ", err))
						if v != 0 {
							if _, loaded := returned.LoadOrStore(v, true); loaded {
								dup.Add(1)
							}
							nAccounted.Add(1)
						}
					}()
					<-done
				}()
			}
			wg.Wait()
			deadline := time.Now().Add(2 * time.Second)
			for nAccounted.Load() < nProduced.Load() && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			time.Sleep(50 * time.Millisecond)
			var lost []int64
			produced.Range(func(k, v any) bool {
				_, r := returned.Load(k)
				_, d := discarded.Load(k)
				if !r && !d {
					lost = append(lost, k.(int64))
					if len(lost) < 8 {
						var ci int
						fmt.Sscanf(v.(string), "call %d", &ci)
						e, _ := callErr.Load(ci)
						t.Logf("lost %d: %v; call returned: %v", k, v, e)
					}
				}
				return true
			})
			t.Logf("produced %d, accounted %d, dup %d, lost %d, panics %d (unexpected %d), goexits %d",
				nProduced.Load(), nAccounted.Load(), dup.Load(), len(lost), panics.Load(), unexpected.Load(), goexits.Load())
			if dup.Load() != 0 || unexpected.Load() != 0 {
				t.Errorf("dup %d unexpected panics %d", dup.Load(), unexpected.Load())
			}
			if len(lost) != 0 {
				t.Errorf("%d results neither returned nor discarded (e.g. %v)", len(lost), lost[:min(5, len(lost))])
			}
		})
	}
}
