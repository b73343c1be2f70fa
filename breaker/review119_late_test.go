package breaker_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/resilience"
)

var errReview119 = errors.New("boom")

// A call admitted while closed that ends (failing) while the breaker is
// half-open, or after it closed again, is not counted; late outcomes keep
// Requests >= outcomes.
func TestReview119LateAcrossStates(t *testing.T) {
	for _, buckets := range []int{1, 4} {
		synctest.Test(t, func(t *testing.T) {
			b := breaker.New("x", breaker.Window(time.Second, buckets), breaker.ConsecutiveFailures(3), breaker.OpenTimeout(100*time.Millisecond))
			ctx := context.Background()
			slow := make(chan error, 1)
			go func() {
				slow <- b.Execute(ctx, func(context.Context) error { time.Sleep(3 * time.Second); return errReview119 })
			}()
			time.Sleep(10 * time.Millisecond)
			for i := 0; i < 3; i++ {
				b.Execute(ctx, func(context.Context) error { return errReview119 })
			}
			if b.State() != resilience.StateOpen {
				t.Fatalf("not open")
			}
			time.Sleep(200 * time.Millisecond)
			if err := b.Execute(ctx, func(context.Context) error { return nil }); err != nil {
				t.Fatal(err)
			}
			if b.State() != resilience.StateClosed {
				t.Fatalf("probe did not close: %v", b.State())
			}
			<-slow // ends at 3 s, closed gen: dropped
			if st := b.State(); st != resilience.StateClosed {
				t.Fatalf("buckets %d: a late failure of an earlier generation changed state: %v", buckets, st)
			}
			c := b.Counts()
			if c.TotalFailures != 0 || uint64(c.Requests) < uint64(c.TotalSuccesses)+uint64(c.TotalFailures)+uint64(c.TotalExclusions) {
				t.Fatalf("buckets %d: counts %+v", buckets, c)
			}
			// healthy: slow successes across windows, one fast failure per window: never opens
			for w := 0; w < 10; w++ {
				go b.Execute(ctx, func(context.Context) error { time.Sleep(1500 * time.Millisecond); return nil })
				go b.Execute(ctx, func(context.Context) error { time.Sleep(1500 * time.Millisecond); return nil })
				time.Sleep(400 * time.Millisecond)
				b.Execute(ctx, func(context.Context) error { return errReview119 })
				time.Sleep(400 * time.Millisecond)
				b.Execute(ctx, func(context.Context) error { return errReview119 })
				c := b.Counts()
				if b.State() != resilience.StateClosed || uint64(c.Requests) < uint64(c.TotalSuccesses)+uint64(c.TotalFailures)+uint64(c.TotalExclusions) {
					t.Fatalf("buckets %d window %d: state %v counts %+v", buckets, w, b.State(), c)
				}
				time.Sleep(300 * time.Millisecond)
			}
			time.Sleep(2 * time.Second)
		})
	}
}
