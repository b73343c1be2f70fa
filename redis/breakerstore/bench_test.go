package breakerstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/redis/breakerstore"
	"github.com/resiliencekit/resiliencekit/redis/redistest"
)

// BenchmarkSharedBreaker compares a call through a local breaker (the
// baseline) with one through a breaker shared on a real redis-server, in
// the same run, on one goroutine and in parallel.
func BenchmarkSharedBreaker(b *testing.B) {
	srv := redistest.Start(b)
	opts := []breaker.Option{breaker.ConsecutiveFailures(5), breaker.FailureRate(0.5, 100), breaker.Window(10*time.Second, 10)}
	for _, s := range []struct {
		name string
		opts []breaker.Option
	}{
		{"Local", opts},
		{"Shared", append(opts, breaker.Shared(breakerstore.New(srv.Client(), "bench:")))},
	} {
		br := breaker.New("bench-"+s.name, s.opts...)
		op := func(context.Context) error { return nil }
		ctx := context.Background()
		b.Run(s.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = br.Execute(ctx, op)
			}
		})
		b.Run(s.name+"Parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					_ = br.Execute(ctx, op)
				}
			})
		})
		_ = br.Close()
	}
}
