package pipeline

import (
	"context"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/throttle"
)

func TestAllocsSuccess(t *testing.T) {
	ok := func(ctx context.Context) (int, error) { return 1, nil }
	watch := func(ctx context.Context) (int, error) { <-ctx.Done(); return 1, nil }
	_ = watch
	cfgs := map[string][]Option{
		"breaker+retry":          {WithBreaker(breaker.New("a")), WithRetry(retrypolicy.New())},
		"budget+breaker+retry":   {WithTimeBudget(time.Second), WithBreaker(breaker.New("b")), WithRetry(retrypolicy.New())},
		"waitopen closed":        {WithBreaker(breaker.New("c")), WithRetry(retrypolicy.New()), WaitWhenOpen()},
		"waitopen closed+budget": {WithTimeBudget(time.Second), WithBreaker(breaker.New("c2")), WithRetry(retrypolicy.New()), WaitWhenOpen()},
		"limit":                  {WithBreaker(breaker.New("d")), WithRetry(retrypolicy.New()), WithLimit(limit.NewAIMD())},
		"throttle":               {WithBreaker(breaker.New("e")), WithRetry(retrypolicy.New()), WithThrottle(throttle.New())},
		"attempt timeout":        {WithBreaker(breaker.New("f")), WithRetry(retrypolicy.New()), WithAttemptTimeout(time.Second)},
		"hedge fixed, no fire":   {WithBreaker(breaker.New("g")), WithRetry(retrypolicy.New()), WithHedging(hedge.New(hedge.Delay(time.Hour)))},
	}
	for name, opts := range cfgs {
		p := New(opts...)
		Do(context.Background(), p, ok)
		n := testing.AllocsPerRun(200, func() { Do(context.Background(), p, ok) })
		t.Logf("%-24s %v allocs", name, n)
	}
}
