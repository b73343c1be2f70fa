package pipeline_test

import (
	"context"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/throttle"
)

// A successful call that neither waited nor retried allocates nothing,
// through a breaker with every gate in front of the dependency.
func TestReview112NoAllocsForAPlainSuccess(t *testing.T) {
	if raceEnabled {
		t.Skip("allocations differ under -race")
	}
	cases := map[string][]pipeline.Option{
		"breaker+retry+limit": {pipeline.WithRetry(retrypolicy.New()), pipeline.WithLimit(limit.NewFixed(8))},
		"breaker+retry+aimd+throttle+wait": {pipeline.WithRetry(retrypolicy.New()), pipeline.WithLimit(limit.NewAIMD()),
			pipeline.WithThrottle(throttle.New()), pipeline.WaitWhenOpen()},
	}
	for name, opts := range cases {
		b := breaker.New("a"+name, breaker.FailureRate(0.5, 10), breaker.Window(10*time.Second, 10))
		p := pipeline.New(append([]pipeline.Option{pipeline.WithBreaker(b)}, opts...)...)
		ctx := context.Background()
		op := func(context.Context) (int, error) { return 1, nil }
		for range 100 {
			_, _ = pipeline.Do(ctx, p, op)
		}
		if n := testing.AllocsPerRun(200, func() { _, _ = pipeline.Do(ctx, p, op) }); n != 0 {
			t.Errorf("%s: %v allocations a successful call", name, n)
		}
	}
}
