package breaker_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/resiliencekit/resiliencekit/breaker"
)

func ExampleBreaker_SetMode() {
	b := breaker.New("payments")
	_ = b.SetMode(context.Background(), breaker.ForcedOpen, "alice") // a dependency known bad
	err := b.Execute(context.Background(), func(context.Context) error { return nil })
	fmt.Println(err)
	fmt.Println(errors.Is(err, breaker.ErrOpen), b.State())
	_ = b.SetMode(context.Background(), breaker.Normal, "alice")
	fmt.Println(b.Execute(context.Background(), func(context.Context) error { return nil }), b.State())
	// Output:
	// breaker "payments": circuit breaker is forced open by alice
	// true open
	// <nil> closed
}
