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

// A loop stopped by its guard (a breaker that opened) goes on, once the
// breaker lets the call through again, with the attempts it has left.
func ExampleResume() {
	policy := retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(0))
	open := false
	guard := func() error {
		if open {
			return errors.New("breaker open")
		}
		return nil
	}
	attempts := 0
	op := func(ctx context.Context) (string, error) {
		attempts++
		if attempts == 1 {
			open = true // the breaker opens as the first attempt fails
			return "", errors.New("connection reset")
		}
		return "done", nil
	}
	_, err := retrypolicy.DoGuarded(context.Background(), policy, guard, op)
	fmt.Println(err)

	open = false // the caller waited for the breaker, which closed
	res, err := retrypolicy.Resume(context.Background(), policy, guard, err, op)
	fmt.Println(res, err, attempts)
	// Output:
	// retry: gave up after 1 attempt (breaker open): connection reset
	// done <nil> 2
}
