package pipeline_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/throttle"
)

// A dead dependency behind breaker + WaitWhenOpen + throttle, 300
// callers at a time. Attempts sent while the breaker is not closed must
// be its probes: HalfOpenRequests (1) per half-open spell. The throttle no
// longer sees them (a probe passes it), so nothing else bounds them.
func TestReview107WaitWhenOpenProbesOnly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var transitions atomic.Int64
		b := breaker.New("r107p", breaker.ConsecutiveFailures(3), breaker.OpenTimeout(time.Second), breaker.HalfOpenRequests(1),
			breaker.WithListener(resilience.ListenerFunc(func(ev resilience.Event) {
				if ev.Kind == resilience.EventStateChange {
					transitions.Add(1)
				}
			})))
		th := throttle.New()
		p := pipeline.New(
			pipeline.WithBreaker(b),
			pipeline.WaitWhenOpen(),
			pipeline.WithThrottle(th),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(10*time.Millisecond))),
		)
		var notClosed, total atomic.Int64
		op := func(ctx context.Context) (int, error) {
			total.Add(1)
			if b.State() != resilience.StateClosed {
				notClosed.Add(1)
			}
			time.Sleep(20 * time.Millisecond)
			return 0, review107Unavailable{}
		}
		var wg sync.WaitGroup
		for w := range 300 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(time.Duration(w) * time.Millisecond)
				for range 5 {
					ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
					_, _ = pipeline.Do(ctx, p, op)
					cancel()
				}
			}()
		}
		wg.Wait()
		t.Logf("attempts %d, sent while not closed %d, state changes %d", total.Load(), notClosed.Load(), transitions.Load())
		// Each half-open spell begins with a change of state: at most one
		// probe each.
		if notClosed.Load() > transitions.Load() {
			t.Errorf("%d attempts sent while the breaker was not closed, with %d changes of state", notClosed.Load(), transitions.Load())
		}
	})
}
