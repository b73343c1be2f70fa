package pipeline

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// A call whose only attempt a full concurrency limit refused: the
// operation never ran. Error.Attempts counts the attempt all the same
// (its doc: in a pipeline, an attempt its gates refused counts); the
// refusal is not retried, and its class is rejected.
func TestReview45LimitRefusalAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := limit.NewFixed(1, limit.MaxWaiting(0))
		p := New(WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(0))), WithLimit(l))
		hold := make(chan struct{})
		started := make(chan struct{})
		go func() {
			_, _ = Do(t.Context(), p, func(context.Context) (int, error) { close(started); <-hold; return 1, nil })
		}()
		<-started
		ran := 0
		_, err := Do(t.Context(), p, func(context.Context) (int, error) { ran++; return 0, nil })
		close(hold)
		var re *retrypolicy.Error
		if err == nil {
			t.Fatal("not refused")
		}
		if resilience.Classify(err) != resilience.ClassRejected {
			t.Errorf("class %v: %v", resilience.Classify(err), err)
		}
		if !errors.As(err, &re) {
			t.Fatalf("not a retrypolicy.Error: %v", err)
		}
		if re.Attempts != 1 || ran != 0 {
			t.Errorf("Error.Attempts %d (want 1), the operation ran %d times (want 0): %v", re.Attempts, ran, err)
		}
		synctest.Wait()
		_ = time.Second
	})
}
