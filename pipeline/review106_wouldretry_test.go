package pipeline_test

import (
	"context"
	"errors"
	"testing"

	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

type review106Hostile struct{}

func (review106Hostile) Error() string { return "hostile" }
func (review106Hostile) Unwrap() error { panic("unwrap panics") }

var review106Sentinel = errors.New("sentinel")

// A single-attempt call (a POST without a key) whose operation fails with
// an error whose methods panic, in a pipeline whose policy has a RetryIf
// asking errors.Is: before the session the pipeline asked its own
// retryable (classify.Safely) and returned the error; now it asks
// Policy.WouldRetry, which hands the error to RetryIf outside any
// recover, and the call panics instead of failing with the operation's
// error (the toolkit's own question about an event).
func TestReview106SingleAttemptHostileErrorWithRetryIf(t *testing.T) {
	p := pipeline.New(pipeline.WithRetry(retrypolicy.New(retrypolicy.RetryIf(func(err error) bool {
		return errors.Is(err, review106Sentinel)
	}))))
	var got error
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Errorf("a single-attempt call panicked as the pipeline asked whether it would retry (for EventNotRetried): %v", r)
			}
		}()
		_, got = pipeline.Do(context.Background(), p, func(context.Context) (int, error) { return 0, review106Hostile{} }, pipeline.SingleAttempt())
	}()
	_ = got
}

// EventNotRetried for single calls: only where the policy would retry.
func TestReview106NotRetriedFollowsPolicy(t *testing.T) {
	transient := errors.New("503")
	for _, tc := range []struct {
		name   string
		policy *retrypolicy.Policy
		err    error
		want   int
	}{
		{"default transient", retrypolicy.New(), transient, 1},
		{"max 1", retrypolicy.New(retrypolicy.MaxAttempts(1)), transient, 0},
		{"permanent", retrypolicy.New(), resilience.Permanent(errors.New("400")), 0},
		{"retryif permanent", retrypolicy.New(retrypolicy.RetryIf(func(error) bool { return true })), resilience.Permanent(errors.New("409")), 1},
		{"unlimited", retrypolicy.New(retrypolicy.MaxAttempts(0)), transient, 1},
	} {
		n := 0
		p := pipeline.New(pipeline.WithRetry(tc.policy), pipeline.WithListener(resilience.ListenerFunc(func(ev resilience.Event) {
			if ev.Kind == resilience.EventNotRetried {
				n++
			}
		})))
		_, _ = pipeline.Do(context.Background(), p, func(context.Context) (int, error) { return 0, tc.err }, pipeline.SingleAttempt())
		if n != tc.want {
			t.Errorf("%s: %d EventNotRetried, want %d", tc.name, n, tc.want)
		}
	}
}
