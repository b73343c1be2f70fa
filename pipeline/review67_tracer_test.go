package pipeline

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/resilience"
)

type slowTracer67 struct{ d time.Duration }
type slowTrace67 struct{ d time.Duration }

func (s slowTracer67) StartCall(ctx context.Context, name string) (context.Context, resilience.CallTrace) {
	return ctx, slowTrace67(s)
}
func (s slowTrace67) StartAttempt(ctx context.Context, a resilience.AttemptInfo) (context.Context, func(error)) {
	time.Sleep(s.d)
	return ctx, func(error) {}
}
func (s slowTrace67) End(error) {}

// The hedging delay ran from the arming of the race, before the tracer started the
// first attempt's span: a tracer slower than the delay got a hedge for a call whose
// operation answers at once. The adaptive delay learns the operation's time only
// (Observe starts after the span), so any tracer time counted against it. The delay
// now runs from the span's start. In real time: a loaded machine's scheduling may
// hedge a call of the adaptive case, a quarter of them at most.
func TestReview67SlowTracerHedges(t *testing.T) {
	{
		for _, tc := range []struct {
			name   string
			h      *hedge.Policy
			tracer time.Duration
			op     time.Duration
		}{
			{"fixed 10ms, tracer 20ms, op 1ms", hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxShare(1)), 20 * time.Millisecond, time.Millisecond},
			{"p95, tracer 2ms, op 1ms", hedge.New(hedge.MaxShare(1)), 2 * time.Millisecond, time.Millisecond},
		} {
			p := New(WithHedging(tc.h), WithTracer(slowTracer67{tc.tracer}))
			var attempts, hedges atomic.Int32
			const calls = 40
			for range calls {
				Do(context.Background(), p, func(ctx context.Context) (int, error) {
					attempts.Add(1)
					if p.IsHedge(ctx) {
						hedges.Add(1)
					}
					time.Sleep(tc.op)
					return 1, nil
				})
				time.Sleep(5 * time.Millisecond)
			}
			d, _ := tc.h.After()
			t.Logf("%s: %d calls, %d hedges (delay %v)", tc.name, calls, hedges.Load(), d)
			if hedges.Load() > calls/4 {
				t.Errorf("%s: %d of %d calls hedged though every operation answered in %v, under the delay", tc.name, hedges.Load(), calls, tc.op)
			}
		}
	}
}

// In a testing/synctest bubble, a tracer whose StartAttempt sleeps (fake time) while a
// hedge is due hung the bubble: the hedge goroutine waited on state.mu, held across the
// first attempt's StartAttempt, which synctest does not count as durably blocked. The
// hedging delay now runs from the span's start, so no hedge is due while it starts.
func TestReview67SynctestTracerHang(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := New(WithHedging(hedge.New(hedge.Delay(10*time.Millisecond), hedge.MaxShare(1))), WithTracer(slowTracer67{20 * time.Millisecond}))
		Do(context.Background(), p, func(ctx context.Context) (int, error) { return 1, nil })
	})
}
