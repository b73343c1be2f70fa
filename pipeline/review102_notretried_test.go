package pipeline_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

type review102Events struct {
	mu sync.Mutex
	ev []resilience.Event
}

func (l *review102Events) OnEvent(e resilience.Event) {
	l.mu.Lock()
	l.ev = append(l.ev, e)
	l.mu.Unlock()
}

func (l *review102Events) count(k resilience.EventKind) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, e := range l.ev {
		if e.Kind == k {
			n++
		}
	}
	return n
}

// EventNotRetried: "a call made to have a single attempt ... failed with
// Err, an error that would otherwise have been retried". Whether it would
// have been is the policy's to say (RetryIf, MaxAttempts(1)); the
// pipeline asks the default classification instead.
func TestReview102_NotRetriedFollowsThePolicy(t *testing.T) {
	transient := errors.New("503")
	permanentButRetried := resilience.Permanent(errors.New("409 conflict"))
	for _, c := range []struct {
		name   string
		policy *retrypolicy.Policy
		err    error
		want   int
	}{
		{"RetryIf never", retrypolicy.New(retrypolicy.RetryIf(func(error) bool { return false })), transient, 0},
		{"MaxAttempts(1)", retrypolicy.New(retrypolicy.MaxAttempts(1)), transient, 0},
		{"RetryIf always, permanent", retrypolicy.New(retrypolicy.RetryIf(func(error) bool { return true })), permanentButRetried, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			// First, what the policy does with the error on a call that is
			// not single: the ground truth of "would otherwise have been retried".
			l0 := &review102Events{}
			p := pipeline.New(pipeline.WithRetry(c.policy.With(retrypolicy.BaseDelay(0))), pipeline.WithListener(l0))
			_, _ = pipeline.Do(context.Background(), p, func(context.Context) (int, error) { return 0, c.err })
			retried := l0.count(resilience.EventRetry) > 0
			if retried != (c.want == 1) {
				t.Fatalf("setup: retried=%v", retried)
			}
			l := &review102Events{}
			p = pipeline.New(pipeline.WithRetry(c.policy.With(retrypolicy.BaseDelay(0))), pipeline.WithListener(l))
			_, _ = pipeline.Do(context.Background(), p, func(context.Context) (int, error) { return 0, c.err }, pipeline.SingleAttempt())
			if got := l.count(resilience.EventNotRetried); got != c.want {
				t.Errorf("EventNotRetried %d times, want %d (the policy retried it: %v)", got, c.want, retried)
			}
		})
	}
}

type review102SelfWrap struct{}

func (e *review102SelfWrap) Error() string { return "self" }
func (e *review102SelfWrap) Unwrap() error { return e }
