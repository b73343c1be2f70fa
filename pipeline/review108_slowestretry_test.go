package pipeline_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// review108: the breaker takes a call's whole time, from its admission,
// retries and their delays included, for "the dependency's slowest recent
// answer". One call that a 503 with Retry-After: 2 s made wait, and that
// then succeeded at once, makes the breaker leave out, for 60 to 80 s,
// every call that the dependency then hangs on with a budget under 2 s:
// the dependency never answered slower than at once, those calls had time
// enough (1 s, ten times the 100 ms floor), yet a dependency that hangs
// does not open the breaker (breaker package doc: "a dependency that hangs
// opens it through the calls that had more").
func TestReview108RetriedCallInflatesSlowestAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("dep")
		p := pipeline.New(pipeline.WithBreaker(b), pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(2), retrypolicy.MaxDelay(5*time.Second))))
		// A blip: the first attempt is refused with a Retry-After of 2 s,
		// the second answered at once.
		n := 0
		_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
			n++
			if n == 1 {
				return 0, resilience.RetryAfter(errors.New("503"), 2*time.Second)
			}
			return 1, nil
		})
		if err != nil || n != 2 {
			t.Fatalf("rig: err %v after %d attempts", err, n)
		}
		// Then the dependency hangs. Callers give each call 1 s.
		hang := func(ctx context.Context) (int, error) {
			<-ctx.Done()
			return 0, ctx.Err()
		}
		calls := 0
		for i := 0; i < 20 && b.State() == resilience.StateClosed; i++ {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_, _ = pipeline.Do(ctx, p, hang)
			cancel()
			calls++
		}
		if b.State() == resilience.StateClosed {
			t.Errorf("a dependency that hung on %d calls in a row, each with 1 s (its slowest answer: at once, after a 2 s Retry-After of the pipeline's own waiting), did not open the breaker (counts %+v)", calls, b.Counts())
		}
	})
}
