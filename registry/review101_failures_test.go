package registry_test

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/registry"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

func pstate(t *testing.T, reg *registry.Registry, p *pipeline.Pipeline, name string) registry.PipelineState {
	// The registry forgets a pipeline nothing references: p stays alive until the snapshot is read.
	defer runtime.KeepAlive(p)
	for _, ps := range reg.Snapshot().Pipelines {
		if ps.Name == name {
			return ps
		}
	}
	t.Fatalf("no pipeline %q", name)
	return registry.PipelineState{}
}

// A hedged pipeline with a concurrency limit: call B fails its first
// attempt, call A then holds the only slot, B's retry is refused by the
// limit (B fails: one failure, one Limited); A's hedge is refused by the
// gate (no refusal counted); A succeeds.
func TestReview101LimitRefusesRetryWithHedging(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := registry.New()
		p, err := reg.AddPipeline(pipeline.New(pipeline.WithName("p"),
			pipeline.WithLimit(limit.NewFixed(1)),
			pipeline.WithHedging(hedge.New(hedge.Delay(5*time.Millisecond), hedge.MaxShare(1))),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(20*time.Millisecond), retrypolicy.MaxDelay(20*time.Millisecond), retrypolicy.Jitter(retrypolicy.None)))))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		var wg sync.WaitGroup
		var errA, errB error
		wg.Go(func() {
			_, errB = pipeline.Do(ctx, p, func(context.Context) (int, error) {
				time.Sleep(time.Millisecond)
				return 0, errors.New("boom")
			})
		})
		time.Sleep(2 * time.Millisecond)
		wg.Go(func() {
			_, errA = pipeline.Do(ctx, p, func(ctx context.Context) (int, error) {
				select {
				case <-time.After(100 * time.Millisecond):
					return 1, nil
				case <-ctx.Done():
					return 0, ctx.Err()
				}
			})
		})
		wg.Wait()
		if errA != nil || errB == nil {
			t.Fatalf("A %v, B %v", errA, errB)
		}
		ps := pstate(t, reg, p, "p")
		t.Logf("B: %v; %+v", errB, ps)
		if ps.Calls != 2 || ps.Successes != 1 || ps.Failures != 1 || ps.Limited != 1 {
			t.Errorf("calls %d successes %d failures %d limited %d; want 2 1 1 1", ps.Calls, ps.Successes, ps.Failures, ps.Limited)
		}
	})
}

// WaitWhenOpen: a call's first attempt fails and opens the breaker, its
// retry is stopped, it waits, the probe succeeds: one call, no failure.
// A second call that panics in its retry after a failure: a failure. A
// third whose retry calls runtime.Goexit: a failure.
func TestReview101WaitWhenOpenPanicGoexit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := registry.New()
		b := breaker.New("b", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(50*time.Millisecond))
		p, err := reg.AddPipeline(pipeline.New(pipeline.WithName("p"), pipeline.WithBreaker(b), pipeline.WaitWhenOpen(),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond), retrypolicy.MaxDelay(time.Millisecond)))))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		n := 0
		_, err = pipeline.Do(ctx, p, func(context.Context) (int, error) {
			n++
			if n == 1 {
				return 0, errors.New("boom")
			}
			return 1, nil
		})
		if err != nil {
			t.Fatalf("waiting call: %v", err)
		}
		ps := pstate(t, reg, p, "p")
		if ps.Successes != 1 || ps.Failures != 0 || ps.Calls != 1 {
			t.Errorf("after a resumed call: successes %d failures %d calls %d", ps.Successes, ps.Failures, ps.Calls)
		}
		// a panicking retry
		b.SetMode(ctx, breaker.Disabled, "t")
		func() {
			defer func() { recover() }()
			m := 0
			_, _ = pipeline.Do(ctx, p, func(context.Context) (int, error) {
				m++
				if m == 1 {
					return 0, errors.New("boom")
				}
				panic("bug")
			})
		}()
		// a Goexit retry
		done := make(chan struct{})
		go func() {
			defer close(done)
			m := 0
			_, _ = pipeline.Do(ctx, p, func(context.Context) (int, error) {
				m++
				if m == 1 {
					return 0, errors.New("boom")
				}
				runtime.Goexit()
				return 0, nil
			})
		}()
		<-done
		ps = pstate(t, reg, p, "p")
		if ps.Calls != 3 || ps.Successes != 1 || ps.Failures != 2 {
			t.Errorf("calls %d successes %d failures %d; want 3 1 2 (%+v)", ps.Calls, ps.Successes, ps.Failures, ps)
		}
	})
}
