package pipeline_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/throttle"
)

// A call whose first attempt the throttle or the limit refused (nothing
// sent) is never counted against the dependency by the breaker: with
// ConsecutiveFailures(1), 1,000 such refusals leave it closed.
func TestReview160RefusalsNeverTripBreaker(t *testing.T) {
	for _, withRetry := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			th := throttle.New()
			for range 40 {
				if tk, err := th.Admit(); err == nil {
					th.Done(tk, errReview160Blip)
				}
			}
			lim := limit.NewFixed(1)
			hold, _ := lim.Acquire(context.Background())
			for _, gate := range []pipeline.Option{pipeline.WithThrottle(th), pipeline.WithLimit(lim)} {
				b := breaker.New("r160", breaker.ConsecutiveFailures(1), breaker.FailureRate(0.01, 1))
				opts := []pipeline.Option{pipeline.WithBreaker(b), gate, pipeline.WithTimeBudget(time.Second)}
				if withRetry {
					opts = append(opts, pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3))))
				}
				p := pipeline.New(opts...)
				refused := 0
				for range 1000 {
					_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) { return 1, nil })
					if errors.Is(err, throttle.ErrThrottled) || errors.Is(err, limit.ErrLimited) {
						refused++
					}
					if b.State() != resilience.StateClosed {
						t.Fatalf("retry %v: breaker %v after %d refusals, last %v", withRetry, b.State(), refused, err)
					}
				}
				if refused == 0 {
					t.Fatalf("setup: nothing refused")
				}
			}
			lim.Release(hold, nil)
		})
	}
}
