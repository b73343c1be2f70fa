package pipeline_test

import (
	"context"
	"fmt"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/throttle"
)

// Example_overload puts every overload stage in front of one dependency.
func Example_overload() {
	inventory := pipeline.New(
		pipeline.WithTimeBudget(2*time.Second),
		pipeline.WithBreaker(breaker.New("inventory")),
		pipeline.WaitWhenOpen(), // ride out a short outage instead of failing, sending nothing
		pipeline.WithRetry(retrypolicy.New(
			retrypolicy.WithQuota(retrypolicy.NewQuota(0.1, 10, 10*time.Second)), // hedges draw on it too
		)),
		pipeline.WithHedging(hedge.New(hedge.Quantile(0.95))), // a twin for the slowest 5%
		pipeline.WithThrottle(throttle.New()),                 // K = 2 over 10 s
		pipeline.WithLimit(limit.NewAIMD(limit.MaxWaiting(100))),
	)

	n, err := pipeline.Do(context.Background(), inventory, func(ctx context.Context) (int, error) {
		return 42, nil
	})
	fmt.Println(n, err)
	// Output: 42 <nil>
}
