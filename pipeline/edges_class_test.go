package pipeline

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// Classifying the error of an attempt cut by the attempt timeout (the
// commonest failure of a slow dependency) allocates, on every Classify:
// attemptTimeoutError.Unwrap makes a new slice each time. ClassOf says
// it allocates nothing; issue 28 asks for classification that allocates
// nothing.
func TestClassifyAttemptTimeoutAllocs(t *testing.T) {
	_, err := Do(context.Background(), New(WithAttemptTimeout(time.Millisecond)), func(ctx context.Context) (int, error) {
		<-ctx.Done()
		return 0, ctx.Err()
	})
	if !errors.Is(err, ErrAttemptTimeout) {
		t.Fatalf("err %v", err)
	}
	wrapped := fmt.Errorf("fetch: %w", err)
	for name, e := range map[string]error{"attempt timeout": err, "wrapped": wrapped,
		"retry error": &retrypolicy.Error{Attempts: 2, Reason: retrypolicy.ErrMaxAttempts, Last: err}} {
		if n := testing.AllocsPerRun(100, func() { resilience.Classify(e) }); n != 0 {
			t.Errorf("%s: Classify allocates %v times", name, n)
		}
		if n := testing.AllocsPerRun(100, func() { resilience.ClassOf(e) }); n != 0 {
			t.Errorf("%s: ClassOf allocates %v times", name, n)
		}
	}
}
