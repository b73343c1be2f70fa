package registry_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/registry"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

var review43Down = errors.New("down")

func review43Pipe(b *testing.B, registered bool, opts ...pipeline.Option) *pipeline.Pipeline {
	p := pipeline.New(opts...)
	if registered {
		var err error
		if p, err = registry.New().AddPipeline(p); err != nil {
			b.Fatal(err)
		}
	}
	return p
}

// BenchmarkReview43Cost compares registered and unregistered pipelines
// on the success path, on a breaker that is open (fast rejections) and on
// calls that fail after retries, serially and in parallel.
func BenchmarkReview43Cost(b *testing.B) {
	ok := func(context.Context) (int, error) { return 1, nil }
	fail := func(context.Context) (int, error) { return 0, review43Down }
	for _, reg := range []bool{false, true} {
		name := map[bool]string{false: "Unregistered", true: "Registered"}[reg]
		b.Run("Success/"+name, func(b *testing.B) {
			p := review43Pipe(b, reg, pipeline.WithBreaker(breaker.New("s")), pipeline.WithRetry(retrypolicy.New()))
			b.ReportAllocs()
			for b.Loop() {
				_, _ = pipeline.Do(context.Background(), p, ok)
			}
		})
		b.Run("SuccessParallel/"+name, func(b *testing.B) {
			p := review43Pipe(b, reg, pipeline.WithBreaker(breaker.New("s")), pipeline.WithRetry(retrypolicy.New()))
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					_, _ = pipeline.Do(context.Background(), p, ok)
				}
			})
		})
		b.Run("Hedged/"+name, func(b *testing.B) {
			p := review43Pipe(b, reg, pipeline.WithName("h"), pipeline.WithHedging(hedge.New(hedge.Delay(time.Second))))
			b.ReportAllocs()
			for b.Loop() {
				_, _ = pipeline.Do(context.Background(), p, ok)
			}
		})
		b.Run("Open/"+name, func(b *testing.B) {
			br := breaker.New("o")
			_ = br.SetMode(context.Background(), breaker.ForcedOpen, "bench")
			p := review43Pipe(b, reg, pipeline.WithBreaker(br), pipeline.WithRetry(retrypolicy.New()))
			b.ReportAllocs()
			for b.Loop() {
				_, _ = pipeline.Do(context.Background(), p, ok)
			}
		})
		b.Run("FailRetried/"+name, func(b *testing.B) {
			br := breaker.New("f", breaker.ConsecutiveFailures(1<<30))
			p := review43Pipe(b, reg, pipeline.WithBreaker(br), pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.WithSleep(func(context.Context, time.Duration) error { return nil }))))
			b.ReportAllocs()
			for b.Loop() {
				_, _ = pipeline.Do(context.Background(), p, fail)
			}
		})
	}
}
