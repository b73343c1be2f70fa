package registry_test

import (
	"context"
	"fmt"
	"log"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/registry"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// kept keeps what the examples registered.
var kept []any

// register is docs/dashboard.md's example.
func register() error {
	reg := registry.Default // or registry.New()
	payments, err := reg.AddPipeline(pipeline.New(
		pipeline.WithBreaker(breaker.New("payments")),
		pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3))),
	))
	if err != nil {
		return err // registry.ErrDuplicate: the name is taken
	}
	// Call through payments, not through the pipeline given.

	hosts := breaker.NewGroup(1000, func(host string) *breaker.Breaker {
		b := breaker.New(host)
		if err := reg.AddBreaker(b); err != nil { // a breaker alone
			log.Printf("breaker %q not on the dashboard: %v", host, err)
		}
		return b
	})
	kept = append(kept, payments, hosts) // the registry holds them weakly
	_, _ = pipeline.Do(context.Background(), payments, func(context.Context) (int, error) { return 1, nil })
	b, _ := hosts.Get("api.example.com")
	_ = b.Execute(context.Background(), func(context.Context) error { return nil })
	return nil
}

func ExampleDefault() {
	fmt.Println(register())
	fmt.Println(register()) // the same name twice
	breakers, pipelines := registry.Default.Names()
	fmt.Println(breakers, pipelines)
	// Output:
	// <nil>
	// registry: name already registered: pipeline "payments"
	// [api.example.com payments] [payments]
}
