package breaker_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// Cancellations are ignored: a probe whose caller cancels mid-call (its
// error a failure) frees its slot for the next call, which decides; a ctx
// done before the call takes no slot.
func TestReviewCanceledProbeIgnored(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("x", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(time.Second))
		_ = b.Execute(context.Background(), func(context.Context) error { return errBoom })
		time.Sleep(2 * time.Second)
		done, cancel := context.WithCancel(context.Background())
		cancel()
		if err := b.Execute(done, func(context.Context) error { t.Error("ran"); return nil }); err != context.Canceled {
			t.Errorf("done ctx: %v", err)
		}
		ctx, cancel2 := context.WithCancel(context.Background())
		_ = b.Execute(ctx, func(context.Context) error { cancel2(); return errBoom })
		if b.State() != resilience.StateHalfOpen {
			t.Fatalf("a canceled probe's failure counted: %v", b.State())
		}
		if c := b.Counts(); c.TotalExclusions != 1 || c.TotalFailures != 0 {
			t.Errorf("counts %+v", c)
		}
		if err := b.Execute(context.Background(), func(context.Context) error { return nil }); err != nil || b.State() != resilience.StateClosed {
			t.Errorf("next probe: %v, %v", err, b.State())
		}
		// Closed: canceled calls neither trip nor reset the run.
		_ = b.Execute(context.Background(), func(context.Context) error { return context.Canceled })
		if b.State() != resilience.StateClosed {
			t.Errorf("canceled tripped: %v", b.State())
		}
	})
}
