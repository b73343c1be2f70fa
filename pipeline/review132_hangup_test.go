package pipeline_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

var errDead132 = errors.New("503 dead")

// dead132 fails every attempt after d, unless its context ends first.
func dead132(d time.Duration) resilience.Operation[int] {
	return func(ctx context.Context) (int, error) {
		select {
		case <-time.After(d):
			return 0, errDead132
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// hangUp132 runs n calls to p, each canceled by its caller after hangup.
func hangUp132(p *pipeline.Pipeline, op resilience.Operation[int], n int, hangup time.Duration) {
	for range n {
		ctx, cancel := context.WithCancel(context.Background())
		t := time.AfterFunc(hangup, cancel)
		pipeline.Do(ctx, p, op)
		t.Stop()
		cancel()
		time.Sleep(time.Millisecond)
	}
}

// Control: without hedging, callers who hang up after the dead dependency
// failed an attempt open its breaker (the promise of e04b8ca).
func TestReview132HangupNoHedgeOpens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("dead", breaker.ConsecutiveFailures(3), breaker.OpenTimeout(time.Hour))
		p := pipeline.New(pipeline.WithBreaker(b),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(5), retrypolicy.BaseDelay(100*time.Millisecond))))
		hangUp132(p, dead132(300*time.Millisecond), 10, 350*time.Millisecond)
		if s := b.State(); s != resilience.StateOpen {
			t.Fatalf("breaker %v after 10 hung-up calls to a dead dependency, want open", s)
		}
	})
}

// With hedging: the first attempt failed (a dependency's answer), hedges
// still out when the caller hangs up. The race returns the hedges'
// cancellation, the answer is lost, and the breaker never opens.
func TestReview132HangupHedgedOpens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("dead", breaker.ConsecutiveFailures(3), breaker.OpenTimeout(time.Hour))
		p := pipeline.New(pipeline.WithBreaker(b),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(5), retrypolicy.BaseDelay(100*time.Millisecond))),
			pipeline.WithHedging(hedge.New(hedge.Delay(100*time.Millisecond), hedge.MaxExtra(2), hedge.MaxShare(1))))
		hangUp132(p, dead132(300*time.Millisecond), 10, 350*time.Millisecond)
		if s := b.State(); s != resilience.StateOpen {
			t.Fatalf("breaker %v after 10 hung-up hedged calls to a dead dependency (each saw a failed attempt), want open; counts %+v", s, b.Counts())
		}
	})
}

// A pipeline with a breaker and no retry whose operation is a retry loop
// (a nested pipeline, or a client that retries): the inner loop carries
// the dependency's answer, but the outer single attempt drops it.
func TestReview132HangupNestedNoOuterRetryOpens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("dead", breaker.ConsecutiveFailures(3), breaker.OpenTimeout(time.Hour))
		inner := pipeline.New(pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(5), retrypolicy.BaseDelay(100*time.Millisecond))))
		outer := pipeline.New(pipeline.WithBreaker(b))
		op := func(ctx context.Context) (int, error) { return pipeline.Do(ctx, inner, dead132(300*time.Millisecond)) }
		hangUp132(outer, op, 10, 350*time.Millisecond)
		if s := b.State(); s != resilience.StateOpen {
			t.Fatalf("breaker %v after 10 hung-up calls to a dead dependency through a nested retrying pipeline, want open; counts %+v", s, b.Counts())
		}
	})
}

// The same nested case with an attempt timeout on the outer pipeline.
func TestReview132HangupNestedAttemptTimeoutOpens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("dead", breaker.ConsecutiveFailures(3), breaker.OpenTimeout(time.Hour))
		inner := pipeline.New(pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(5), retrypolicy.BaseDelay(100*time.Millisecond))))
		outer := pipeline.New(pipeline.WithBreaker(b), pipeline.WithAttemptTimeout(5*time.Second),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3))))
		op := func(ctx context.Context) (int, error) { return pipeline.Do(ctx, inner, dead132(300*time.Millisecond)) }
		hangUp132(outer, op, 10, 350*time.Millisecond)
		if s := b.State(); s != resilience.StateOpen {
			t.Fatalf("breaker %v, want open; counts %+v", s, b.Counts())
		}
	})
}
