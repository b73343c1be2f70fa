package breaker_test

import (
	"context"
	"testing"

	"github.com/sony/gobreaker/v2"

	"github.com/resiliencekit/resiliencekit/breaker"
)

// BenchmarkExecute is a successful call through a breaker in the Normal
// mode, as a ratio to a bare gobreaker (the baseline): what a mode that
// can be forced costs a breaker that never is.
//
//	cd benchmarks && go run ./ratios -pkg ../breaker -bench Execute -baseline Gobreaker -cpu 1
func BenchmarkExecute(b *testing.B) {
	b.Run("Gobreaker", func(b *testing.B) {
		cb := gobreaker.NewCircuitBreaker[struct{}](gobreaker.Settings{Name: "bench"})
		b.ReportAllocs()
		for b.Loop() {
			if _, err := cb.Execute(func() (struct{}, error) { return struct{}{}, nil }); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Breaker", func(b *testing.B) {
		br := breaker.New("bench")
		ctx := context.Background()
		op := func(context.Context) error { return nil }
		b.ReportAllocs()
		for b.Loop() {
			if err := br.Execute(ctx, op); err != nil {
				b.Fatal(err)
			}
		}
	})
}
