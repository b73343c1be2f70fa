package pipeline

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// r156SlowStart is a tracer whose attempts' spans take d to start (first
// attempts only: hedges are not the point here).
type r156SlowStart struct{ d time.Duration }

func (r r156SlowStart) StartCall(ctx context.Context, _ string) (context.Context, resilience.CallTrace) {
	return ctx, r
}
func (r r156SlowStart) StartAttempt(ctx context.Context, a resilience.AttemptInfo) (context.Context, func(error)) {
	time.Sleep(r.d)
	return ctx, func(error) { time.Sleep(r.d) }
}
func (r156SlowStart) End(error) {}

// r156Learned runs calls through p until the policy has learned from
// enough hedged (raced) calls, every operation taking exactly 10 ms, and
// checks the quantile is 10 ms: no wait at the gates, in a span's start or
// between retries counts.
func r156Learned(t *testing.T, h *hedge.Policy, p *Pipeline, callers int, stream bool, retried bool) {
	t.Helper()
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for range 120 {
				var n atomic.Int32
				op := func(ctx context.Context) (int, error) {
					k := n.Add(1)
					time.Sleep(10 * time.Millisecond)
					if retried && k == 1 {
						return 0, r156Fail
					}
					return 1, nil
				}
				if stream {
					_, release, err := DoStream(t.Context(), p, op)
					if err != nil {
						t.Errorf("call: %v", err)
						return
					}
					time.Sleep(3 * time.Millisecond) // reading the stream is no latency of the attempt
					release()
				} else if _, err := Do(t.Context(), p, op); err != nil {
					t.Errorf("call: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	time.Sleep(50 * time.Millisecond) // a losing hedge of the last call ends behind it: the bubble must not end before
	d, ok := h.After()
	if !ok || d != 10*time.Millisecond {
		t.Errorf("learned delay %v (%v), want exactly 10ms: every attempt took 10 ms", d, ok)
	}
}

func TestReview156LatencyExcludesLimitWait(t *testing.T) {
	for _, stream := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			h := hedge.New()
			// Limit 1 and a queue: two callers take turns, each waiting up to
			// 10 ms at the gate before its attempt is sent.
			p := New(WithHedging(h), WithLimit(limit.NewFixed(1, limit.MaxWaiting(4))), WithTimeBudget(time.Second))
			r156Learned(t, h, p, 2, stream, false)
		})
	}
}

func TestReview156LatencyExcludesTracerStart(t *testing.T) {
	for _, stream := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			h := hedge.New()
			p := New(WithHedging(h), WithTracer(r156SlowStart{7 * time.Millisecond}))
			r156Learned(t, h, p, 1, stream, false)
		})
	}
}

func TestReview156LatencyRetried(t *testing.T) {
	for _, stream := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			h := hedge.New()
			p := New(WithHedging(h), WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(2), retrypolicy.BaseDelay(20*time.Millisecond))))
			r156Learned(t, h, p, 1, stream, true)
		})
	}
}

// All at once: limit wait, tracer, retry, several callers.
func TestReview156LatencyAllGates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := hedge.New(hedge.Quantile(0.5))
		p := New(WithHedging(h), WithLimit(limit.NewFixed(1, limit.MaxWaiting(8))), WithTimeBudget(5*time.Second),
			WithTracer(r156SlowStart{3 * time.Millisecond}),
			WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(2), retrypolicy.BaseDelay(5*time.Millisecond))))
		r156Learned(t, h, p, 3, false, true)
	})
}
