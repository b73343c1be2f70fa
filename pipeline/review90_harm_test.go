package pipeline_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// healthy answers after d, or returns ctx.Err() if the caller's context ends first.
func r90healthy(d time.Duration) resilience.Operation[int] {
	return func(ctx context.Context) (int, error) {
		select {
		case <-time.After(d):
			return 1, nil
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// Callers whose deadlines are too short for a healthy dependency must not
// open the breaker, whatever stages the pipeline has.
func TestReview90ShortDeadlinesDoNoHarm(t *testing.T) {
	cases := map[string]func(b *breaker.Breaker) *pipeline.Pipeline{
		"plain": func(b *breaker.Breaker) *pipeline.Pipeline { return pipeline.New(pipeline.WithBreaker(b)) },
		"retry": func(b *breaker.Breaker) *pipeline.Pipeline {
			return pipeline.New(pipeline.WithBreaker(b), pipeline.WithRetry(retrypolicy.New()))
		},
		"retry+attemptTimeout": func(b *breaker.Breaker) *pipeline.Pipeline {
			return pipeline.New(pipeline.WithBreaker(b), pipeline.WithRetry(retrypolicy.New()), pipeline.WithAttemptTimeout(time.Second))
		},
		"budget": func(b *breaker.Breaker) *pipeline.Pipeline {
			return pipeline.New(pipeline.WithBreaker(b), pipeline.WithTimeBudget(5*time.Second))
		},
		"wait": func(b *breaker.Breaker) *pipeline.Pipeline {
			return pipeline.New(pipeline.WithBreaker(b), pipeline.WaitWhenOpen(), pipeline.WithTimeBudget(5*time.Second))
		},
		"hedge": func(b *breaker.Breaker) *pipeline.Pipeline {
			return pipeline.New(pipeline.WithBreaker(b), pipeline.WithHedging(hedge.New(hedge.Delay(50*time.Millisecond))))
		},
		"hedge+retry": func(b *breaker.Breaker) *pipeline.Pipeline {
			return pipeline.New(pipeline.WithBreaker(b), pipeline.WithRetry(retrypolicy.New()), pipeline.WithHedging(hedge.New(hedge.Delay(50*time.Millisecond))))
		},
	}
	for name, mk := range cases {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := breaker.New("dep")
				p := mk(b)
				op := r90healthy(200 * time.Millisecond)
				for i := 0; i < 20; i++ { // warm up: the breaker times answers of 200 ms
					if _, err := pipeline.Do(context.Background(), p, op); err != nil {
						t.Fatalf("warmup: %v", err)
					}
				}
				for _, budget := range []time.Duration{50 * time.Millisecond, 150 * time.Millisecond, 199 * time.Millisecond} {
					for i := 0; i < 10; i++ {
						ctx, cancel := context.WithTimeout(context.Background(), budget)
						_, err := pipeline.Do(ctx, p, op)
						cancel()
						if err == nil {
							continue
						}
						if breaker.IsRejection(err) {
							t.Fatalf("budget %v call %d rejected: %v (counts %+v)", budget, i, err, b.Counts())
						}
					}
				}
				if st := b.State(); st != resilience.StateClosed {
					t.Fatalf("breaker %v after short-deadline callers only (counts %+v)", st, b.Counts())
				}
				// and a caller that cancels
				for i := 0; i < 10; i++ {
					ctx, cancel := context.WithCancel(context.Background())
					time.AfterFunc(30*time.Millisecond, cancel)
					_, _ = pipeline.Do(ctx, p, op)
					cancel()
				}
				if st := b.State(); st != resilience.StateClosed {
					t.Fatalf("breaker %v after canceling callers (counts %+v)", st, b.Counts())
				}
			})
		})
	}
}

var _ = errors.New
