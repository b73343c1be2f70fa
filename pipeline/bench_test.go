package pipeline_test

import (
	"context"
	"testing"

	"github.com/sony/gobreaker/v2"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
	"github.com/resiliencekit/resiliencekit/throttle"
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

// BenchmarkPipelineOverloadStages adds the throttle and an adaptive
// concurrency limit to BenchmarkPipelineParallel's stages; run both with
// -cpu 1,16 to see the limit's lock under contention.
func BenchmarkPipelineOverloadStages(b *testing.B) {
	benchmarkParallel(b,
		pipeline.WithThrottle(throttle.New()),
		pipeline.WithLimit(limit.NewAIMD(limit.Initial(1000))),
	)
}

// BenchmarkPipelineParallel is BenchmarkPipelineSuccess from many
// goroutines, the baseline of BenchmarkPipelineOverloadStages.
func BenchmarkPipelineParallel(b *testing.B) { benchmarkParallel(b) }

// benchmarkParallel runs successful calls from many goroutines through a
// pipeline of a breaker, a retry policy and opts.
func benchmarkParallel(b *testing.B, opts ...pipeline.Option) {
	p := pipeline.New(append([]pipeline.Option{
		pipeline.WithBreaker(breaker.New("bench")),
		pipeline.WithRetry(retrypolicy.New()),
	}, opts...)...)
	ctx := context.Background()
	op := func(context.Context) (int, error) { return 1, nil }
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := pipeline.Do(ctx, p, op); err != nil {
				b.Fatal(err)
			}
		}
	})
}
