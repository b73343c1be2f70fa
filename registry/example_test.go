package registry_test

import (
	"context"
	"fmt"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/registry"
)

func ExampleRegistry_AddPipeline() {
	reg := registry.New() // or registry.Default
	payments, err := reg.AddPipeline(pipeline.New(pipeline.WithBreaker(breaker.New("payments"))))
	if err != nil {
		panic(err)
	}
	for range 3 {
		_, _ = pipeline.Do(context.Background(), payments, func(context.Context) (string, error) { return "ok", nil })
	}
	_ = reg.SetMode(context.Background(), "payments", breaker.ForcedOpen, "alice")
	_, err = pipeline.Do(context.Background(), payments, func(context.Context) (string, error) { return "ok", nil })
	fmt.Println(err)

	s := reg.Snapshot()
	fmt.Println(s.Pipelines[0].Name, s.Pipelines[0].Calls, s.Pipelines[0].Successes, s.Pipelines[0].Rejected)
	fmt.Println(s.Breakers[0].Name, s.Breakers[0].State, s.Breakers[0].Mode.Mode, s.Breakers[0].Mode.By)
	// Output:
	// breaker "payments": circuit breaker is forced open by alice
	// payments 4 3 1
	// payments open forced-open alice
}
