package breaker_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// Waiters go when the core turns half-open (HalfOpenRequests of them, as
// probes), the rest when a probe closes it; each is released within a
// tick of the open timeout.
func TestReviewWaitReleasedOnCoreTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("x", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(time.Second), breaker.HalfOpenRequests(2))
		start := time.Now()
		_ = b.Execute(context.Background(), func(context.Context) error { return errBoom })
		rej := b.Execute(context.Background(), func(context.Context) error { return nil })
		if !errors.Is(rej, breaker.ErrOpen) {
			t.Fatal(rej)
		}
		var mu sync.Mutex
		var at []time.Duration
		var wg sync.WaitGroup
		for range 5 {
			wg.Go(func() {
				if err := b.Wait(context.Background(), rej); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				at = append(at, time.Since(start))
				mu.Unlock()
				_ = b.Execute(context.Background(), func(context.Context) error { time.Sleep(10 * time.Millisecond); return nil })
			})
		}
		wg.Wait()
		t.Logf("released at %v", at)
		for _, d := range at {
			if d < time.Second || d > time.Second+20*time.Millisecond {
				t.Errorf("released at %v", d)
			}
		}
		if b.State() != resilience.StateClosed {
			t.Errorf("state %v", b.State())
		}
	})
}

// Forced modes over the core: ForcedClosed leaves the machine where it
// was (open, timing out to half-open underneath); Disabled counts and
// changes state but runs what it would reject; Normal resumes.
func TestReviewForcedModesOverCore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := &recL{}
		b := breaker.New("x", breaker.ConsecutiveFailures(2), breaker.OpenTimeout(time.Second), breaker.WithListener(l))
		ctx := context.Background()
		fail := func() error { return b.Execute(ctx, func(context.Context) error { return errBoom }) }
		_ = b.SetMode(ctx, breaker.ForcedClosed, "t")
		for range 5 {
			_ = fail()
		}
		if b.Snapshot().Own != resilience.StateClosed {
			t.Errorf("forced closed moved the core: %v", b.Snapshot().Own)
		}
		_ = b.SetMode(ctx, breaker.Disabled, "t")
		_ = fail()
		_ = fail()
		if b.Snapshot().Own != resilience.StateOpen {
			t.Errorf("disabled: core %v", b.Snapshot().Own)
		}
		ran := false
		_ = b.Execute(ctx, func(context.Context) error { ran = true; return nil })
		if !ran {
			t.Error("disabled rejected a call")
		}
		_ = b.SetMode(ctx, breaker.ForcedOpen, "t")
		time.Sleep(2 * time.Second)
		if err := b.Execute(ctx, func(context.Context) error { return nil }); !errors.Is(err, breaker.ErrForcedOpen) {
			t.Errorf("forced open: %v", err)
		}
		_ = b.SetMode(ctx, breaker.Normal, "t")
		if b.State() != resilience.StateHalfOpen {
			t.Errorf("normal again: %v", b.State())
		}
		if err := b.Execute(ctx, func(context.Context) error { return nil }); err != nil || b.State() != resilience.StateClosed {
			t.Errorf("probe: %v, %v", err, b.State())
		}
		t.Logf("changes: %v", l.changes())
	})
}
