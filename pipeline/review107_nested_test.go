package pipeline_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/throttle"
)

type review107Unavailable struct{}

func (review107Unavailable) Error() string                     { return "503 unavailable" }
func (review107Unavailable) ResilienceClass() resilience.Class { return resilience.ClassTransient }

func review107Overload(th *throttle.Throttle) {
	fail := review107Unavailable{}
	for range 5000 {
		if tk, err := th.Admit(); err == nil {
			th.Done(tk, fail)
		}
	}
}

// review107Inner returns a fresh inner pipeline (retry 3, its own
// throttle) whose throttle refuses every retry once the first attempt
// has failed: each call sends one attempt, which the dependency fails,
// and its retry is refused by the throttle.
func review107Inner() *pipeline.Pipeline {
	th := throttle.New(throttle.Window(100 * time.Second))
	return pipeline.New(
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Microsecond), retrypolicy.MaxDelay(time.Microsecond))),
		pipeline.WithThrottle(th),
		pipeline.WithListener(resilience.ListenerFunc(func(ev resilience.Event) {
			if ev.Kind == resilience.EventAttempt && ev.Attempt == 1 && ev.Err != nil {
				review107Overload(th)
			}
		})),
	)
}

// A dead dependency behind a pipeline that a pipeline with a breaker
// calls (nested pipelines): every call sent an attempt the dependency
// failed, and its retry was refused by the inner throttle. The outer
// breaker must count these calls (docs: "the breaker counts a call whose
// retry they refused as the failure its sent attempt was"), whether or
// not the outer pipeline retries.
func TestReview107NestedOuterRetryBreakerCounts(t *testing.T) {
	for _, outerRetries := range []bool{false, true} {
		b := breaker.New("r107", breaker.ConsecutiveFailures(5), breaker.OpenTimeout(time.Hour))
		opts := []pipeline.Option{pipeline.WithBreaker(b)}
		if outerRetries {
			opts = append(opts, pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(2), retrypolicy.BaseDelay(time.Microsecond), retrypolicy.MaxDelay(time.Microsecond))))
		}
		outer := pipeline.New(opts...)
		sent := 0
		for range 20 {
			inner := review107Inner()
			_, err := pipeline.Do(context.Background(), outer, func(ctx context.Context) (int, error) {
				return pipeline.Do(ctx, inner, func(context.Context) (int, error) {
					sent++
					return 0, review107Unavailable{}
				})
			})
			if err == nil {
				t.Fatal("dead dependency answered")
			}
			if breaker.IsRejection(err) {
				break
			}
			if !errors.Is(err, throttle.ErrThrottled) {
				t.Fatalf("not the scenario: %v", err)
			}
		}
		if st := b.State(); st != resilience.StateOpen {
			t.Errorf("outer retries=%v: outer breaker %v after %d calls each failed by the dependency (%d attempts sent, every retry throttled): want open", outerRetries, st, 20, sent)
		} else {
			t.Logf("outer retries=%v: opened after %d attempts sent", outerRetries, sent)
		}
	}
}
