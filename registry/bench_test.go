package registry_test

import (
	"context"
	"testing"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/registry"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// BenchmarkCall is the success path of a pipeline of a breaker and a
// retry, not registered (Unregistered, the baseline) and registered, to
// read as a ratio:
//
//	cd benchmarks && go run ./ratios -pkg ../registry -bench Call -baseline Unregistered -cpu 1
func BenchmarkCall(b *testing.B) {
	for _, registered := range []bool{false, true} {
		name := "Unregistered"
		if registered {
			name = "Registered"
		}
		b.Run(name, func(b *testing.B) {
			p := pipeline.New(pipeline.WithBreaker(breaker.New("bench")), pipeline.WithRetry(retrypolicy.New()))
			if registered {
				var err error
				if p, err = registry.New().AddPipeline(p); err != nil {
					b.Fatal(err)
				}
			}
			ctx := context.Background()
			op := func(context.Context) (int, error) { return 1, nil }
			b.ReportAllocs()
			for b.Loop() {
				if _, err := pipeline.Do(ctx, p, op); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
