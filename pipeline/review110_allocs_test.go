package pipeline_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

func TestReview110AllocsSuccess(t *testing.T) {
	if testing.Short() {
		t.Skip()
	}
	ok := func(context.Context) (int, error) { return 1, nil }
	for name, p := range map[string]*pipeline.Pipeline{
		"breaker+retry": pipeline.New(pipeline.WithBreaker(breaker.New("a")), pipeline.WithRetry(retrypolicy.New())),
		"breaker+retry+limit": pipeline.New(pipeline.WithBreaker(breaker.New("b")), pipeline.WithRetry(retrypolicy.New()),
			pipeline.WithLimit(limit.NewFixed(4, limit.MaxWaiting(4)))),
		"breaker only": pipeline.New(pipeline.WithBreaker(breaker.New("c"))),
	} {
		ctx := context.Background()
		n := testing.AllocsPerRun(1000, func() { _, _ = pipeline.Do(ctx, p, ok) })
		if n != 0 {
			t.Errorf("%s: a success without retries allocates %v, want 0", name, n)
		}
		ctx2, cancel := context.WithTimeout(ctx, time.Hour)
		n = testing.AllocsPerRun(1000, func() { _, _ = pipeline.Do(ctx2, p, ok) })
		cancel()
		if n != 0 {
			t.Errorf("%s: a success with a deadline allocates %v, want 0", name, n)
		}
	}
}

// A single failed attempt (not retried: terminal) allocates no more than
// the error it returns and the retry stage's: compare with the same
// pipeline without a breaker.
func TestReview110AllocsOneFailure(t *testing.T) {
	bad := resilience.Terminal(errors.New("no"))
	fail := func(context.Context) (int, error) { return 0, bad }
	with := pipeline.New(pipeline.WithBreaker(breaker.New("x", breaker.ConsecutiveFailures(1<<30))), pipeline.WithRetry(retrypolicy.New()))
	without := pipeline.New(pipeline.WithRetry(retrypolicy.New()))
	ctx := context.Background()
	a := testing.AllocsPerRun(1000, func() { _, _ = pipeline.Do(ctx, with, fail) })
	b := testing.AllocsPerRun(1000, func() { _, _ = pipeline.Do(ctx, without, fail) })
	t.Logf("with breaker %v, without %v", a, b)
	if a > b {
		t.Errorf("one failed attempt through a breaker allocates %v, %v without", a, b)
	}
}
