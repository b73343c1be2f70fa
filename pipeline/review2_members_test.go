package pipeline_test

import (
	"context"
	"errors"
	"testing"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// r2fwd forwards to other listeners and says so with Members, as safe
// reads it; its Members panics once armed.
type r2fwd struct{ armed *bool }

func (r2fwd) OnEvent(resilience.Event) {}
func (f r2fwd) Members() []resilience.Listener {
	if *f.armed {
		panic("members")
	}
	return []resilience.Listener{f}
}

// A listener whose Members panics (called on a breaker's state change,
// unguarded, under the breaker's lock) changes the outcome of the call
// that tripped the breaker: it panics. Pre-existing (safe.Fan).
func TestReview2PanickingMembersChangesOutcome(t *testing.T) {
	armed := false
	b := breaker.New("members", breaker.ConsecutiveFailures(1))
	p := pipeline.New(pipeline.WithBreaker(b), pipeline.WithListener(r2fwd{&armed}))
	armed = true
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("the call panicked with %v: a listener's panic reached the caller", r)
		}
	}()
	_, err := pipeline.Do(context.Background(), p, func(context.Context) (int, error) { return 0, errors.New("down") })
	if err == nil {
		t.Error("no error")
	}
}
