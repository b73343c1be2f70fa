package otelevents_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/registry"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// TestReview61Hedging: hedged calls with retries; ground truth is the
// operation's own count of runs, of hedges, and of call outcomes.
func TestReview61Hedging(t *testing.T) {
	for _, ignoreCtx := range []bool{false, true} {
		l, rd := r61New(t)
		reg := registry.New()
		b := breaker.New("dep", breaker.ConsecutiveFailures(1<<30))
		p, err := reg.AddPipeline(pipeline.New(pipeline.WithBreaker(b),
			pipeline.WithHedging(hedge.New(hedge.Delay(500*time.Microsecond), hedge.MaxShare(1), hedge.MaxExtra(2))),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Microsecond), retrypolicy.MaxDelay(time.Microsecond))),
			pipeline.WithListener(l)))
		if err != nil {
			t.Fatal(err)
		}
		var runs, calls, okCalls, failCalls atomic.Int64
		var wg sync.WaitGroup
		for g := 0; g < 32; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 60; i++ {
					calls.Add(1)
					_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
						runs.Add(1)
						d := time.Duration(rand.IntN(2000)) * time.Microsecond
						if ignoreCtx {
							time.Sleep(d)
						} else {
							select {
							case <-time.After(d):
							case <-ctx.Done():
								return 0, ctx.Err()
							}
						}
						if rand.IntN(3) == 0 {
							return 0, r61Transient
						}
						return 1, nil
					})
					if err == nil {
						okCalls.Add(1)
					} else {
						failCalls.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		s := r61Sums(t, rd)
		ps := reg.Snapshot().Pipelines[0]
		t.Logf("ignoreCtx=%v truth calls=%d runs=%d ok=%d fail=%d", ignoreCtx, calls.Load(), runs.Load(), okCalls.Load(), failCalls.Load())
		t.Logf("otel calls=%v attempts=%v(total %d) retries=%v giveups=%v", s["resilience.calls"], s["resilience.attempts"], r61Total(s["resilience.attempts"]), s["resilience.retries"], s["resilience.giveups"])
		t.Logf("registry calls=%d attempts=%d succ=%d fail=%d retries=%d hedged=%d", ps.Calls, ps.Attempts, ps.Successes, ps.Failures, ps.Retries, ps.Hedged)
		if ps.Calls != uint64(calls.Load()) || ps.Successes != uint64(okCalls.Load()) || ps.Failures != uint64(failCalls.Load()) {
			t.Errorf("registry calls/succ/fail %d/%d/%d, want %d/%d/%d", ps.Calls, ps.Successes, ps.Failures, calls.Load(), okCalls.Load(), failCalls.Load())
		}
		// A hedge reported (EventHedged) as its race was decided, or as
		// the attempt before it failed with no other hedge out (review156),
		// is not sent (documented, resilience.EventHedged): the registry's
		// Hedged may count a few more than ran, never fewer (13 of 1,236,
		// 1.05%, once in CI under -race on 2 loaded cores).
		if n := uint64(runs.Load()); ps.Attempts+ps.Hedged < n || ps.Attempts+ps.Hedged > n+ps.Hedged/50 {
			t.Errorf("registry attempts+hedged %d+%d, runs %d: want at least the runs, at most 2%% of the hedges more", ps.Attempts, ps.Hedged, n)
		}
		if r61Total(s["resilience.calls"]) != calls.Load() || s["resilience.calls"]["dep|success"] != okCalls.Load() {
			t.Errorf("otel calls off")
		}
	}
}
