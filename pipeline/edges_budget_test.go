package pipeline

import (
	"context"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// A time budget spent before the first attempt (here a tiny one; in
// practice one eaten by the time the call took to get there) fails the
// call without calling the operation. The dependency saw nothing, yet the
// breaker counts each such call as its failure and opens.
func TestUnsentCallCountedAsFailure(t *testing.T) {
	for _, withRetry := range []bool{true, false} {
		b := breaker.New("dep", breaker.ConsecutiveFailures(3))
		opts := []Option{WithBreaker(b), WithTimeBudget(time.Nanosecond)}
		if withRetry {
			opts = append(opts, WithRetry(retrypolicy.New()))
		}
		p := New(opts...)
		calls := 0
		for range 5 {
			Do(context.Background(), p, func(ctx context.Context) (int, error) { calls++; return 1, nil })
		}
		c := b.Counts()
		t.Logf("retry=%v: op called %d times; breaker: %+v, check %v", withRetry, calls, c, b.Check())
		if calls == 0 && b.Check() != nil {
			t.Errorf("retry=%v: the breaker opened on calls that never reached the dependency", withRetry)
		}
	}
}

// The same without a retry stage: the operation is called with a context
// already past its deadline; one that honours it returns at once without
// sending, and the breaker counts a failure of the dependency.
func TestUnsentNoRetryCountedAsFailure(t *testing.T) {
	b := breaker.New("dep", breaker.ConsecutiveFailures(3))
	p := New(WithBreaker(b), WithTimeBudget(time.Nanosecond))
	sent := 0
	for range 5 {
		Do(context.Background(), p, func(ctx context.Context) (int, error) {
			if err := ctx.Err(); err != nil {
				return 0, err // as any client does before dialing
			}
			sent++
			return 1, nil
		})
	}
	if sent == 0 && b.Check() != nil {
		t.Errorf("the breaker opened on calls that never reached the dependency: %+v", b.Counts())
	}
}
