package pipeline_test

import (
	"context"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// BenchmarkHedgingParallel is BenchmarkStages' Plain and HedgingNeverFires
// from many goroutines (-cpu 1,16): the races share the pipeline's timer,
// and its lock.
func BenchmarkHedgingParallel(b *testing.B) {
	for _, s := range []struct {
		name string
		opt  pipeline.Option
	}{
		{"Plain", nil},
		{"HedgingNeverFires", pipeline.WithHedging(hedge.New(hedge.Delay(time.Hour)))},
	} {
		b.Run(s.name, func(b *testing.B) {
			p := pipeline.New(pipeline.WithBreaker(breaker.New("bench")), pipeline.WithRetry(retrypolicy.New()), s.opt)
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
		})
	}
}
