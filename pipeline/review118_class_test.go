package pipeline_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

type review118Err struct{ msg string }

func (e *review118Err) Error() string { return e.msg }

// Every documented sentinel, and the operation's own error, reachable
// through the pipeline's error, with and without listener and hedging.
func TestReview118SentinelsReachable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		own := &review118Err{"boom"}
		for _, variant := range []string{"plain", "listener", "hedge"} {
			extra := func(opts ...pipeline.Option) *pipeline.Pipeline {
				switch variant {
				case "listener":
					opts = append(opts, pipeline.WithListener(resilience.ListenerFunc(func(resilience.Event) {})))
				case "hedge":
					opts = append(opts, pipeline.WithHedging(hedge.New(hedge.Delay(time.Millisecond))))
				}
				return pipeline.New(opts...)
			}
			fail := func(ctx context.Context) (int, error) {
				time.Sleep(5 * time.Millisecond)
				return 0, own
			}
			// Max attempts.
			p := extra(pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond))))
			_, err := pipeline.Do(context.Background(), p, fail)
			var re *review118Err
			if !errors.Is(err, retrypolicy.ErrMaxAttempts) || !errors.As(err, &re) || re != own {
				t.Errorf("%s: max attempts: %v", variant, err)
			}
			// Breaker open: second call rejected.
			b := breaker.New("b118"+variant, breaker.ConsecutiveFailures(1), breaker.OpenTimeout(time.Hour))
			p = extra(pipeline.WithBreaker(b))
			_, err = pipeline.Do(context.Background(), p, fail)
			if !errors.As(err, &re) {
				t.Errorf("%s: breaker first call: %v", variant, err)
			}
			_, err = pipeline.Do(context.Background(), p, fail)
			if !errors.Is(err, breaker.ErrOpen) || resilience.Classify(err) != resilience.ClassTerminal {
				t.Errorf("%s: breaker open: %v class %v", variant, err, resilience.Classify(err))
			}
			// Limit refused.
			l := limit.NewFixed(1)
			p = extra(pipeline.WithLimit(l))
			release := make(chan struct{})
			var wg sync.WaitGroup
			wg.Go(func() {
				pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) { <-release; return 0, nil })
			})
			synctest.Wait()
			_, err = pipeline.Do(context.Background(), p, fail)
			if !errors.Is(err, limit.ErrLimited) || resilience.Classify(err) != resilience.ClassRejected {
				t.Errorf("%s: limited: %v class %v", variant, err, resilience.Classify(err))
			}
			close(release)
			wg.Wait()
			// Quota exhausted.
			q := retrypolicy.NewQuota(0, 0, time.Second)
			p = extra(pipeline.WithRetry(retrypolicy.New(retrypolicy.WithQuota(q), retrypolicy.BaseDelay(time.Millisecond))))
			_, err = pipeline.Do(context.Background(), p, fail)
			if !errors.Is(err, retrypolicy.ErrQuotaExhausted) || !errors.As(err, &re) {
				t.Errorf("%s: quota: %v", variant, err)
			}
			// Attempt timeout.
			p = extra(pipeline.WithAttemptTimeout(10 * time.Millisecond))
			_, err = pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) { <-ctx.Done(); return 0, ctx.Err() })
			if !errors.Is(err, pipeline.ErrAttemptTimeout) || !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%s: attempt timeout: %v", variant, err)
			}
			// Budget.
			p = extra(pipeline.WithTimeBudget(20*time.Millisecond), pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(0), retrypolicy.BaseDelay(time.Millisecond))))
			_, err = pipeline.Do(context.Background(), p, fail)
			var rpe *retrypolicy.Error
			if !errors.Is(err, retrypolicy.ErrOutOfTime) || !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &re) || !errors.As(err, &rpe) || !rpe.OwnBudget {
				t.Errorf("%s: budget: %v", variant, err)
			}
		}
	})
}

// The caller's own errors never count against the dependency and are
// not retried: its cancellation mid-attempt, Rejected-marked errors, a
// bad request; the dependency's failures are.
func TestReview118CallerErrorsNotCounted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, variant := range []string{"plain", "listener", "hedge", "budget"} {
			b := breaker.New("c118"+variant, breaker.ConsecutiveFailures(3))
			opts := []pipeline.Option{pipeline.WithBreaker(b), pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(5), retrypolicy.BaseDelay(time.Millisecond)))}
			switch variant {
			case "listener":
				opts = append(opts, pipeline.WithListener(resilience.ListenerFunc(func(resilience.Event) {})))
			case "hedge":
				opts = append(opts, pipeline.WithHedging(hedge.New(hedge.Delay(time.Millisecond))))
			case "budget":
				opts = append(opts, pipeline.WithTimeBudget(time.Second), pipeline.WithAttemptTimeout(500*time.Millisecond))
			}
			p := pipeline.New(opts...)
			var calls atomic.Int32
			for i := range 10 {
				ctx, cancel := context.WithCancel(context.Background())
				go func() { time.Sleep(50 * time.Millisecond); cancel() }()
				calls.Store(0)
				_, err := pipeline.Do(ctx, p, func(ctx context.Context) (int, error) {
					calls.Add(1)
					<-ctx.Done()
					return 0, errors.New("request failed: " + ctx.Err().Error()) // a client that hides the cause
				})
				cancel()
				if err == nil {
					t.Fatalf("%s %d: nil", variant, i)
				}
				if variant != "hedge" && calls.Load() != 1 {
					t.Errorf("%s %d: canceled call made %d attempts", variant, i, calls.Load())
				}
			}
			if c := b.Counts(); c.TotalFailures != 0 || b.State() != resilience.StateClosed {
				t.Errorf("%s: caller cancellations counted: %+v %v", variant, c, b.State())
			}
			for _, mk := range []func(error) error{resilience.Rejected, resilience.Permanent,
				func(e error) error { return resilience.Permanent(resilience.Rejected(e)) },
				func(e error) error { return resilience.Rejected(resilience.Terminal(e)) },
			} {
				for range 10 {
					calls.Store(0)
					_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
						calls.Add(1)
						return 0, mk(errors.New("bad request"))
					})
					if err == nil || calls.Load() != 1 {
						t.Errorf("%s: caller error retried: %d attempts, %v", variant, calls.Load(), err)
					}
				}
			}
			if c := b.Counts(); c.TotalFailures != 0 || b.State() != resilience.StateClosed {
				t.Errorf("%s: caller errors counted: %+v %v", variant, c, b.State())
			}
			// The dependency's failures count.
			for range 3 {
				pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) { return 0, errors.New("503") })
			}
			if b.State() != resilience.StateOpen {
				t.Errorf("%s: 3 failed calls did not open: %+v", variant, b.Counts())
			}
		}
	})
}
