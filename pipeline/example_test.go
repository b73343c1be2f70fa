package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

func ExamplePipeline_Execute() {
	payments := breaker.New("payments", breaker.ConsecutiveFailures(5))
	p := pipeline.New[string](
		pipeline.WithTimeBudget(2*time.Second),
		pipeline.WithBreaker(payments),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Millisecond))),
		pipeline.WithAttemptTimeout(500*time.Millisecond),
	)
	calls := 0
	receipt, err := p.Execute(context.Background(), func(ctx context.Context) (string, error) {
		calls++
		if calls == 1 {
			return "", errors.New("connection reset") // a blip: retried
		}
		return "receipt-17", nil
	})
	fmt.Println(receipt, err, calls, payments.State())
	// Output: receipt-17 <nil> 2 closed
}
