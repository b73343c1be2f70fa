package retrypolicy_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

func ExampleDo() {
	policy := retrypolicy.New(
		retrypolicy.MaxAttempts(4),
		retrypolicy.BaseDelay(10*time.Millisecond),
		retrypolicy.Jitter(retrypolicy.None), // fixed delays, for a stable output
		retrypolicy.WithListener(resilience.ListenerFunc(func(e resilience.Event) {
			if e.Kind == resilience.EventRetry {
				fmt.Printf("attempt %d failed (%v), retrying in %v\n", e.Attempt, e.Err, e.Delay)
			}
		})),
	)
	calls := 0
	price, err := retrypolicy.Do(context.Background(), policy, func(ctx context.Context) (int, error) {
		calls++
		if calls < 3 {
			return 0, errors.New("connection reset")
		}
		return 42, nil
	})
	fmt.Println(price, err)
	// Output:
	// attempt 1 failed (connection reset), retrying in 10ms
	// attempt 2 failed (connection reset), retrying in 20ms
	// 42 <nil>
}
