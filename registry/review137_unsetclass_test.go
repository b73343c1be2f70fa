package registry_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// r137SDKError is an SDK's typed error whose class it leaves unset (the
// zero value) unless it knows better, wrapping what its transport said.
type r137SDKError struct {
	class resilience.Class
	err   error
}

func (e *r137SDKError) Error() string                     { return "sdk: " + e.err.Error() }
func (e *r137SDKError) Unwrap() error                     { return e.err }
func (e *r137SDKError) ResilienceClass() resilience.Class { return e.class }

// A healthy dependency answers 400 (the caller's fault, permanent) to a
// bad request; the SDK wraps it in its own error with the class unset.
// A plain client makes one request and returns the 400. The pipeline must
// not retry it nor count it against the dependency.
func TestReview137UnsetClassOver400(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("r137-400")
		p := pipeline.New(pipeline.WithBreaker(b), pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(time.Millisecond))))
		sent := 0
		const calls = 20
		refused := 0
		for range calls {
			_, err := pipeline.Do(t.Context(), p, func(context.Context) (int, error) {
				sent++
				return 0, &r137SDKError{err: fmt.Errorf("POST /orders: %w", resilience.Permanent(errors.New("400 Bad Request")))}
			})
			if errors.Is(err, breaker.ErrOpen) {
				refused++
			}
		}
		bs := b.Snapshot()
		t.Logf("refused %d; requests sent %d for %d calls; breaker %v, failures %d", refused, sent, calls, bs.State, bs.Counts.TotalFailures)
		if refused > 0 || sent != calls || bs.Counts.TotalFailures != 0 || bs.State != resilience.StateClosed {
			t.Errorf("400s of a healthy dependency: %d of %d calls refused by the breaker (%v), %d requests sent", refused, calls, bs.State, sent)
		}
	})
}
