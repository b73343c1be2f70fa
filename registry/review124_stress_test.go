package registry_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/registry"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// Many goroutines, hedged calls that succeed, fail, panic, with a limit
// roomy enough: every call counted once as a success or a failure, the
// caller's view matching the registry's, nothing in flight at the end.
func TestR124StressCounts(t *testing.T) {
	r := registry.New()
	l := limit.NewFixed(64)
	p, err := r.AddPipeline(pipeline.New(pipeline.WithName("p"), pipeline.WithLimit(l),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(100*time.Microsecond))),
		pipeline.WithHedging(hedge.New(hedge.Quantile(0.5), hedge.MaxShare(0.5), hedge.MaxExtra(2)))))
	if err != nil {
		t.Fatal(err)
	}
	var ok, failed, panicked atomic.Uint64
	var wg sync.WaitGroup
	errX := errors.New("503")
	for range 16 {
		wg.Go(func() {
			for range 150 {
				func() {
					defer func() {
						if recover() != nil {
							panicked.Add(1)
						}
					}()
					_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
						x := rand.IntN(1000)
						d := time.Duration(rand.IntN(2000)) * time.Microsecond
						select {
						case <-time.After(d):
						case <-ctx.Done():
							return 0, ctx.Err()
						}
						switch {
						case x < 2:
							panic("boom")
						case x < 300:
							return 0, errX
						}
						return 1, nil
					})
					if err == nil {
						ok.Add(1)
					} else {
						failed.Add(1)
					}
				}()
			}
		})
	}
	wg.Wait()
	time.Sleep(50 * time.Millisecond)
	s := r95State(t, r, p, "p")
	t.Logf("ok %d failed %d panicked %d\n%+v", ok.Load(), failed.Load(), panicked.Load(), s)
	if s.Calls != 16*150 {
		t.Errorf("Calls %d", s.Calls)
	}
	if s.Successes != ok.Load() {
		t.Errorf("Successes %d, callers saw %d", s.Successes, ok.Load())
	}
	if s.Failures != failed.Load()+panicked.Load() {
		t.Errorf("Failures %d, callers saw %d failed + %d panicked", s.Failures, failed.Load(), panicked.Load())
	}
	if s.Limited != 0 || s.InFlight != 0 {
		t.Errorf("Limited %d InFlight %d", s.Limited, s.InFlight)
	}
}
