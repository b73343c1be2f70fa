package pipeline_test

import (
	"context"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

type r167SelfValue struct{ tags []string }

func (e r167SelfValue) Error() string { return "self value" }
func (e r167SelfValue) Unwrap() error { return e }

type r167FreshCopy struct{ msg string }

func (e r167FreshCopy) Error() string { return e.msg }
func (e r167FreshCopy) Unwrap() error { return &e }

// Promise (resilience.Acyclic): "The pipeline gives every error of an
// operation to it before a stage asks anything of that error": an
// operation's error that wraps itself does not hang the call.
func TestReview167PipelineOpErrorThatNeverEnds(t *testing.T) {
	for name, opErr := range map[string]error{
		"uncomparable value wrapping itself": r167SelfValue{tags: []string{"x"}},
		"new error at each Unwrap":           r167FreshCopy{msg: "fresh"},
	} {
		p := pipeline.New(pipeline.WithBreaker(breaker.New("r167-"+name)),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(2), retrypolicy.BaseDelay(time.Millisecond))))
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = pipeline.Do(context.Background(), p, func(context.Context) (int, error) { return 0, opErr })
		}()
		select {
		case <-done:
		case <-time.After(2 * time.Second):
			t.Errorf("%s: pipeline.Do has not returned after 2 s", name)
		}
	}
}
