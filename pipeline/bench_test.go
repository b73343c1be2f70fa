package pipeline_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/resilience"
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

// BenchmarkPipelineParallelHedging adds hedging that never fires to
// BenchmarkPipelineParallel's stages: concurrent calls share the
// pipeline's timer, and its one spare race, which most of them miss.
func BenchmarkPipelineParallelHedging(b *testing.B) {
	benchmarkParallel(b, pipeline.WithHedging(hedge.New(hedge.Delay(time.Hour))))
}

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

// BenchmarkStages is the success path of a pipeline of a breaker and a
// retry (Plain) with each other stage added alone, beside a bare gobreaker
// and one with the breaker's default window (60 s in 6 buckets), to read
// as ratios to Plain or to either gobreaker:
//
//	cd benchmarks && go run ./ratios -pkg ../pipeline -bench Stages -baseline Plain
//	cd benchmarks && go run ./ratios -pkg ../pipeline -bench Stages -baseline Gobreaker
func BenchmarkStages(b *testing.B) {
	for _, g := range []struct {
		name string
		st   gobreaker.Settings
	}{
		{"Gobreaker", gobreaker.Settings{Name: "bench"}},
		{"GobreakerWindow", gobreaker.Settings{Name: "bench", Interval: time.Minute, BucketPeriod: 10 * time.Second,
			ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= 5 }}},
	} {
		b.Run(g.name, func(b *testing.B) {
			cb := gobreaker.NewCircuitBreaker[int](g.st)
			op := func() (int, error) { return 1, nil }
			b.ReportAllocs()
			for b.Loop() {
				if _, err := cb.Execute(op); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	never := hedge.New(hedge.Delay(time.Hour))
	stages := []struct {
		name string
		opt  pipeline.Option
	}{
		{"Plain", nil},
		{"Quota", pipeline.WithRetry(retrypolicy.New(retrypolicy.WithQuota(retrypolicy.NewQuota(0.1, 10, 10*time.Second))))},
		{"Throttle", pipeline.WithThrottle(throttle.New())},
		{"FixedLimit", pipeline.WithLimit(limit.NewFixed(1000))},
		{"AIMDLimit", pipeline.WithLimit(limit.NewAIMD(limit.Initial(1000)))},
		{"WaitWhenOpen", pipeline.WaitWhenOpen()},
		{"HedgingNeverFires", pipeline.WithHedging(never)},
		{"TimeBudget", pipeline.WithTimeBudget(time.Second)},
		{"AttemptTimeout", pipeline.WithAttemptTimeout(time.Second)},
		{"FilterListener", pipeline.WithListener(wantsNothing{})},
	}
	for _, s := range stages {
		b.Run(s.name, func(b *testing.B) {
			p := pipeline.New(pipeline.WithBreaker(breaker.New("bench")), pipeline.WithRetry(retrypolicy.New()), s.opt)
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

// wantsNothing is a listener that wants no event.
type wantsNothing struct{}

func (wantsNothing) OnEvent(resilience.Event)        {}
func (wantsNothing) Wants(resilience.EventKind) bool { return false }

// BenchmarkFailedCall is a call whose only attempt fails, through a bare
// gobreaker (the baseline, counting no failure toward opening) and
// through a pipeline of a breaker and a retry policy of one attempt:
//
//	cd benchmarks && go run ./ratios -pkg ../pipeline -bench FailedCall -baseline Gobreaker -cpu 1
func BenchmarkFailedCall(b *testing.B) {
	errDown := errors.New("down")
	b.Run("Gobreaker", func(b *testing.B) {
		cb := gobreaker.NewCircuitBreaker[int](gobreaker.Settings{Name: "bench", ReadyToTrip: func(gobreaker.Counts) bool { return false }})
		b.ReportAllocs()
		for b.Loop() {
			if _, err := cb.Execute(func() (int, error) { return 0, errDown }); err == nil {
				b.Fatal("no error")
			}
		}
	})
	b.Run("Pipeline", func(b *testing.B) {
		p := pipeline.New(pipeline.WithBreaker(breaker.New("bench", breaker.ConsecutiveFailures(0), breaker.FailureRate(1, math.MaxUint32))),
			pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(1))))
		ctx := context.Background()
		op := func(context.Context) (int, error) { return 0, errDown }
		b.ReportAllocs()
		for b.Loop() {
			if _, err := pipeline.Do(ctx, p, op); err == nil {
				b.Fatal("no error")
			}
		}
	})
}
