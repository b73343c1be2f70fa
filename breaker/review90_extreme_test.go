package breaker_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/resilience"
)

func TestReview90Extremes(t *testing.T) {
	ctx := context.Background()
	fail := func(context.Context) error { return errors.New("x") }
	ok := func(context.Context) error { return nil }
	t.Run("hugeOpenTimeout", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := breaker.New("h", breaker.OpenTimeout(math.MaxInt64))
			for i := 0; i < 5; i++ {
				_ = b.Execute(ctx, fail)
			}
			s := b.Snapshot()
			t.Logf("NextProbe %v state %v next %v", s.NextProbe, s.State, b.NextProbe())
			time.Sleep(1000 * time.Hour)
			if b.State() != resilience.StateOpen {
				t.Fatal("not open")
			}
			c, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			if err := b.Wait(c, breaker.ErrOpen); !errors.Is(err, breaker.ErrOpen) {
				t.Fatalf("wait: %v", err)
			}
		})
	})
	t.Run("hugeWindow", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := breaker.New("w", breaker.Window(math.MaxInt64, breaker.MaxBuckets), breaker.ConsecutiveFailures(3))
			_ = b.Execute(ctx, fail)
			_ = b.Execute(ctx, fail)
			time.Sleep(24 * 365 * time.Hour)
			_ = b.Execute(ctx, fail)
			if b.State() != resilience.StateOpen {
				t.Fatalf("3 in a row within a huge window: %v %+v", b.State(), b.Counts())
			}
		})
	})
	t.Run("tinyWindow", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := breaker.New("w", breaker.Window(100*time.Millisecond, 100), breaker.ConsecutiveFailures(3))
			for i := 0; i < 10; i++ {
				_ = b.Execute(ctx, fail)
				time.Sleep(60 * time.Millisecond)
				_ = b.Execute(ctx, fail)
				time.Sleep(60 * time.Millisecond)
			}
			if b.State() != resilience.StateClosed {
				t.Fatalf("opened though never 3 failures within 100 ms: %+v", b.Counts())
			}
		})
	})
	t.Run("maxConsecutive", func(t *testing.T) {
		b := breaker.New("c", breaker.ConsecutiveFailures(math.MaxUint32), breaker.FailureRate(1, math.MaxUint32))
		for i := 0; i < 1000; i++ {
			_ = b.Execute(ctx, fail)
		}
		if b.State() != resilience.StateClosed {
			t.Fatal("opened")
		}
	})
	t.Run("tinyOpenTimeoutHungProbe", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := breaker.New("t", breaker.OpenTimeout(1))
			for i := 0; i < 5; i++ {
				_ = b.Execute(ctx, fail)
			}
			time.Sleep(time.Millisecond)
			hang := make(chan struct{})
			go b.Execute(ctx, func(context.Context) error { <-hang; return nil })
			synctest.Wait()
			time.Sleep(time.Microsecond)
			if err := b.Execute(ctx, ok); err != nil {
				t.Fatalf("after 1000 open timeouts: %v", err)
			}
			close(hang)
		})
	})
	t.Run("maxHalfOpen", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := breaker.New("m", breaker.HalfOpenRequests(math.MaxUint32), breaker.OpenTimeout(time.Second))
			for i := 0; i < 5; i++ {
				_ = b.Execute(ctx, fail)
			}
			time.Sleep(2 * time.Second)
			for i := 0; i < 10000; i++ {
				if err := b.Execute(ctx, ok); err != nil {
					t.Fatalf("probe %d: %v", i, err)
				}
			}
			if b.State() != resilience.StateHalfOpen {
				t.Fatalf("%v", b.State())
			}
		})
	})
	t.Run("zeroBreaker", func(t *testing.T) {
		var b breaker.Breaker
		var nb *breaker.Breaker
		for i := 0; i < 10; i++ {
			_ = b.Execute(ctx, fail)
			_ = nb.Execute(ctx, fail)
		}
		if b.State() != resilience.StateClosed || nb.State() != resilience.StateClosed || b.Check() != nil || nb.Check() != nil {
			t.Fatal("zero breaker not closed")
		}
		_ = b.Snapshot()
		_ = nb.Snapshot()
		stop := b.Listen(resilience.ListenerFunc(func(resilience.Event) {}))
		stop()
	})
}
