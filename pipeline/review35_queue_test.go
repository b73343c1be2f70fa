package pipeline_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// review35Dep is a healthy dependency that answers in d, or when its
// caller's context ends.
func review35Dep(d time.Duration, sent *atomic.Int64) resilience.Operation[int] {
	answer := answerIn(d)
	return func(ctx context.Context) (int, error) {
		sent.Add(1)
		return answer(ctx)
	}
}

// TestReview35LimitQueueWaitCountsAsTheDependencysTime: the breaker
// times a call cut short by its caller's deadline from the breaker's
// admission, which comes before the attempt waits in the pipeline's own
// concurrency limit's queue (WithLimit, MaxWaiting). An attempt that
// waited there for most of a 150 ms budget is sent with a few ms left and
// cut short; the breaker takes it for a call that "had" 150 ms, more than
// the dependency's slowest answer (50 ms), and counts it. Callers of 150
// ms (over the documented 100 ms floor, and three times the dependency's
// latency) open the breaker of a healthy dependency through the
// toolkit's own queue; a plain client would have had every call answered
// in 50 ms.
func TestReview35LimitQueueWaitCountsAsTheDependencysTime(t *testing.T) {
	var opened atomic.Int64
	b := breaker.New("dep", breaker.WithListener(resilience.ListenerFunc(func(e resilience.Event) {
		if e.Kind == resilience.EventStateChange && e.To == resilience.StateOpen {
			opened.Add(1)
		}
	})))
	l := limit.NewFixed(2, limit.MaxWaiting(1000))
	p := pipeline.New(pipeline.WithBreaker(b), pipeline.WithLimit(l))
	var sent atomic.Int64
	dep := review35Dep(50*time.Millisecond, &sent)

	// Warm: the dependency's answers, 50 ms, timed.
	for range 5 {
		_, err := pipeline.Do(context.Background(), p, dep)
		require.NoError(t, err)
	}

	var ok, cut, limited, rejected, other atomic.Int64
	stop := time.Now().Add(2 * time.Second)
	var wg sync.WaitGroup
	for range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
				_, err := pipeline.Do(ctx, p, dep)
				cancel()
				switch {
				case err == nil:
					ok.Add(1)
				case breaker.IsRejection(err):
					rejected.Add(1)
					time.Sleep(10 * time.Millisecond)
				case errors.Is(err, limit.ErrLimited):
					limited.Add(1)
				case errors.Is(err, context.DeadlineExceeded):
					cut.Add(1)
				default:
					other.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("breaker counts in its window: %+v", b.Counts())
	t.Logf("ok %d, cut after being sent %d, timed out in the queue %d, rejected by the breaker %d, other %d; breaker opened %d times",
		ok.Load(), cut.Load(), limited.Load(), rejected.Load(), other.Load(), opened.Load())
	assert.Zero(t, opened.Load(), "the breaker of a healthy 50 ms dependency opened: callers with 150 ms budgets, cut short after waiting in the pipeline's own limit queue")
	assert.Zero(t, rejected.Load())
}
