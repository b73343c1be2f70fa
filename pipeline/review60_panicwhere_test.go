package pipeline_test

import (
	"context"
	"runtime/debug"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/throttle"
)

func TestReview60PanicWhere(t *testing.T) {
	cases := map[string][]pipeline.Option{
		"bare":     nil,
		"limit":    {pipeline.WithLimit(limit.NewAIMD())},
		"throttle": {pipeline.WithThrottle(throttle.New())},
		"retry":    {pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(2), retrypolicy.BaseDelay(time.Millisecond)))},
		"retryIf":  {pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(2), retrypolicy.BaseDelay(time.Millisecond), retrypolicy.RetryIf(func(error) bool { return true })))},
		"breaker":  {pipeline.WithBreaker(breaker.New("r60w"))},
		"hedge":    {pipeline.WithHedging(hedge.New(hedge.Delay(time.Millisecond)))},
		"timeout":  {pipeline.WithAttemptTimeout(time.Second)},
	}
	for name, opts := range cases {
		p := pipeline.New(opts...)
		func() {
			defer func() {
				if r := recover(); r != nil {
					if name == "hedge" || name == "retryIf" {
						t.Errorf("%s: Do panicked on the caller's error: %v\n%s", name, r, debug.Stack())
					} else {
						t.Logf("%s: panic %v", name, r)
					}
				} else {
					t.Logf("%s: no panic", name)
				}
			}()
			_, err := pipeline.Do(context.Background(), p, func(ctx context.Context) (int, error) {
				time.Sleep(3 * time.Millisecond)
				var e *r60perr
				return 0, e
			})
			t.Logf("%s: err %v", name, err)
		}()
	}
}
