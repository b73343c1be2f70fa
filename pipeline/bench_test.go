package pipeline_test

import (
	"context"
	"testing"

	"github.com/sony/gobreaker/v2"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// The baseline: a bare gobreaker around the same call. Compare
// BenchmarkPipelineSuccess with it as a ratio.
func BenchmarkGobreakerExecute(b *testing.B) {
	cb := gobreaker.NewCircuitBreaker[int](gobreaker.Settings{Name: "bench"})
	b.ReportAllocs()
	for b.Loop() {
		if _, err := cb.Execute(func() (int, error) { return 1, nil }); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPipelineSuccess(b *testing.B) {
	p := pipeline.New(
		pipeline.WithBreaker(breaker.New("bench")),
		pipeline.WithRetry(retrypolicy.New()),
	)
	ctx := context.Background()
	op := func(context.Context) (int, error) { return 1, nil }
	b.ReportAllocs()
	for b.Loop() {
		if _, err := pipeline.Do(ctx, p, op); err != nil {
			b.Fatal(err)
		}
	}
}
