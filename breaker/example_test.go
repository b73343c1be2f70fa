package breaker_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/resiliencekit/resiliencekit/breaker"
)

func ExampleBreaker_Execute() {
	b := breaker.New("inventory", breaker.ConsecutiveFailures(2))
	down := func(context.Context) error { return errors.New("connection refused") }
	for range 3 {
		err := b.Execute(context.Background(), down)
		fmt.Printf("%v (open: %v)\n", err, errors.Is(err, breaker.ErrOpen))
	}
	fmt.Println(b.State())
	// Output:
	// connection refused (open: false)
	// connection refused (open: false)
	// breaker "inventory": circuit breaker is open (open: true)
	// open
}
