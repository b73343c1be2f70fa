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
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

var errUnavailable112 = errors.New("503")

// hangOpens runs 10 calls of 1 s deadlines to a dependency that hangs and
// reports whether the breaker opened.
func hangOpens112(t *testing.T, b *breaker.Breaker, p *pipeline.Pipeline) bool {
	for range 10 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, _ = pipeline.Do(ctx, p, func(ctx context.Context) (int, error) {
			<-ctx.Done()
			return 0, ctx.Err()
		})
		cancel()
		if b.State() != resilience.StateClosed {
			return true
		}
	}
	return false
}

// A call that waited for the breaker (WaitWhenOpen) goes on with its
// retries (retrypolicy.Resume); a retry of that resumed loop, after a
// Retry-After of 2 s, must be timed from its sending, as a retry of a loop
// that was never stopped is (review108): else "the slowest recent answer"
// becomes 2 s, and a dependency that then hangs on callers of 1 s never
// opens the breaker.
func TestReview112ResumedRetryAfterWaitIsTimedFromItsSending(t *testing.T) {
	for _, resumed := range []bool{false, true} {
		name := "plainRetry"
		if resumed {
			name = "resumedAfterWait"
		}
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := breaker.New("r112", breaker.ConsecutiveFailures(5), breaker.OpenTimeout(500*time.Millisecond))
				p := pipeline.New(pipeline.WithBreaker(b), pipeline.WaitWhenOpen(),
					pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(4))))
				ctx := context.Background()
				var probed atomic.Bool
				var resumedRA atomic.Int32
				call := func() error {
					n := 0
					gave2s := false
					_, err := pipeline.Do(ctx, p, func(context.Context) (int, error) {
						n++
						switch {
						case n == 1 && resumed:
							return 0, resilience.RetryAfter(errUnavailable112, 300*time.Millisecond)
						case resumed && !probed.Swap(true):
							return 1, nil // the probe, whichever call it is
						case !gave2s:
							gave2s = true
							resumedRA.Add(1)
							return 0, resilience.RetryAfter(errUnavailable112, 2*time.Second)
						}
						return 1, nil
					})
					return err
				}
				var wg sync.WaitGroup
				errs := make([]error, 2)
				for i := range 2 {
					wg.Go(func() { errs[i] = call() })
				}
				if resumed {
					time.Sleep(100 * time.Millisecond)
					for range 5 { // open the breaker while the two calls back off
						_, _ = pipeline.Do(ctx, p, func(context.Context) (int, error) {
							return 0, resilience.Terminal(errors.New("down"))
						})
					}
					if b.State() != resilience.StateOpen {
						t.Fatalf("breaker %v, want open", b.State())
					}
				}
				wg.Wait()
				for _, err := range errs {
					if err != nil {
						t.Fatalf("call failed: %v", err)
					}
				}
				if resumedRA.Load() == 0 {
					t.Fatal("no retry after 2 s happened")
				}
				if b.State() != resilience.StateClosed {
					t.Fatalf("breaker %v, want closed", b.State())
				}
				if !hangOpens112(t, b, p) {
					t.Errorf("%s: a dependency that hangs on callers of 1 s did not open the breaker in 10 calls: a retry after Retry-After 2 s was timed from the call's admission", name)
				}
			})
		})
	}
}
