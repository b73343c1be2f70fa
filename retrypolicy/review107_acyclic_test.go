package retrypolicy_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

var review107Bad = errors.New("item 0: invalid")

// review107Batch is a batch's validation error: one per item, joined,
// the caller's fault (permanent). 70,000 items: finite, errors.Is and
// resilience.Classify end on it.
func review107Batch(n int) error {
	errs := make([]error, n)
	errs[0] = review107Bad
	for i := 1; i < n; i++ {
		errs[i] = fmt.Errorf("item %d: invalid", i)
	}
	return resilience.Permanent(errors.Join(errs...))
}

// review107Doubled is a finite tree that shares its branches (a DAG):
// 2^17 leaves, 18 distinct errors.
func review107Doubled() error {
	e := error(resilience.Permanent(review107Bad))
	for range 17 {
		e = errors.Join(e, e)
	}
	return e
}

// selfish wraps itself, but says its class and its hint at the top:
// resilience.Classify answers at once without walking.
type review107Selfish struct{}

func (e *review107Selfish) Error() string                     { return "selfish" }
func (e *review107Selfish) Unwrap() error                     { return e }
func (e *review107Selfish) ResilienceClass() resilience.Class { return resilience.ClassPermanent }

func review107Policy() *retrypolicy.Policy {
	return retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Microsecond), retrypolicy.MaxDelay(time.Microsecond))
}

func TestReview107AcyclicKeepsLegitimateTrees(t *testing.T) {
	cases := []struct {
		name string
		err  func() error
		is   bool // errors.Is(err, review107Bad) holds
	}{
		{"join of 70000", func() error { return review107Batch(70000) }, true},
		{"shared branches 2^17", review107Doubled, true},
		{"self-wrapping, class at the top", func() error { return &review107Selfish{} }, false},
	}
	for _, tc := range cases {
		orig := tc.err()
		if c := resilience.Classify(orig); c != resilience.ClassPermanent {
			t.Fatalf("%s: setup: class %v", tc.name, c)
		}
		for _, via := range []string{"retrypolicy.Do", "pipeline.Do"} {
			calls := 0
			op := func(context.Context) (int, error) { calls++; return 0, tc.err() }
			var err error
			if via == "retrypolicy.Do" {
				_, err = retrypolicy.Do(context.Background(), review107Policy(), op)
			} else {
				_, err = pipeline.Do(context.Background(), pipeline.New(pipeline.WithRetry(review107Policy())), op)
			}
			if calls != 1 {
				t.Errorf("%s via %s: a permanent error was sent %d times (want 1)", tc.name, via, calls)
			}
			if c := resilience.Classify(err); c != resilience.ClassPermanent {
				t.Errorf("%s via %s: class %v, want permanent", tc.name, via, c)
			}
			if tc.is && !errors.Is(err, review107Bad) {
				t.Errorf("%s via %s: errors.Is(err, item error) false for the caller", tc.name, via)
			}
		}
	}
}
