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

// Catches dropping `c == resilience.ClassRejected` from the ignored outcomes:
// a probe refused on our side (a downstream limiter, a throttle) is no
// verdict on the dependency and must not close a half-open breaker.
func TestRejectedProbeDoesNotClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("r", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(time.Second), breaker.HalfOpenRequests(1))
		ctx := context.Background()
		_ = b.Execute(ctx, func(context.Context) error { return errors.New("down") })
		if b.State() != resilience.StateOpen {
			t.Fatalf("state %v, want open", b.State())
		}
		time.Sleep(2 * time.Second)
		if b.State() != resilience.StateHalfOpen {
			t.Fatalf("state %v, want half-open", b.State())
		}
		_ = b.Execute(ctx, func(context.Context) error { return resilience.Rejected(errors.New("not sent")) })
		if b.State() != resilience.StateHalfOpen {
			t.Fatalf("state %v after a rejected probe, want half-open", b.State())
		}
	})
}
