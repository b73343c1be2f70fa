package pipeline_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/throttle"
)

// selfWrapping is an error whose Unwrap, by a bug, returns itself.
type selfWrapping struct{}

func (e *selfWrapping) Error() string { return "wraps itself" }
func (e *selfWrapping) Unwrap() error { return e }

// An operation's error that wraps itself: errors.Is walks it for ever,
// and so did the stages that classify an attempt's error (review102). A
// plain client returns it; the pipeline must return too, within its
// budget, with the error's message.
func TestAnErrorThatWrapsItselfDoesNotHangTheCall(t *testing.T) {
	op := func(context.Context) (int, error) { return 0, &selfWrapping{} }
	tests := []struct {
		name string
		run  func() error
	}{
		{"retry and budget", func() error {
			p := pipeline.New(pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(time.Millisecond))), pipeline.WithTimeBudget(100*time.Millisecond))
			_, err := pipeline.Do(context.Background(), p, op)
			return err
		}},
		{"every stage", func() error {
			p := pipeline.New(pipeline.WithBreaker(breaker.New("dep")), pipeline.WithRetry(retrypolicy.New(retrypolicy.BaseDelay(time.Millisecond))),
				pipeline.WithHedging(hedge.New(hedge.Delay(time.Hour))), pipeline.WithThrottle(throttle.New()), pipeline.WithLimit(limit.NewFixed(4)),
				pipeline.WithAttemptTimeout(time.Second), pipeline.WithTimeBudget(100*time.Millisecond))
			_, err := pipeline.Do(context.Background(), p, op)
			return err
		}},
		{"retrypolicy alone", func() error {
			_, err := retrypolicy.Do(context.Background(), retrypolicy.New(retrypolicy.BaseDelay(time.Millisecond)), op)
			return err
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() { done <- tc.run() }() // left spinning if it hangs
			select {
			case err := <-done:
				assert.ErrorContains(t, err, "wraps itself")
			case <-time.After(10 * time.Second):
				t.Fatal("the call never returned")
			}
		})
	}
}
