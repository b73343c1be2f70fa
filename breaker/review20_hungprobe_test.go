package breaker_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// TestReview20AHungProbeHoldsTheBreakerForABoundedTime, from a review: a
// half-open breaker's probe that never answers (a connection in a black
// hole, a caller without a deadline) held its only slot, and every call
// was rejected as long as it hung, an hour after the dependency was back.
// Another probe goes once it has been out for 10 open timeouts (1 s by
// default), not before; its success closes the breaker.
func TestReview20AHungProbeHoldsTheBreakerForABoundedTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("dep")
		for b.State() != resilience.StateOpen {
			_ = b.Execute(context.Background(), func(context.Context) error { return errors.New("503") })
		}
		time.Sleep(200 * time.Millisecond) // past OpenTimeout (100 ms)
		hang, release := context.WithCancel(context.Background())
		defer release()
		started := make(chan struct{})
		go func() {
			_ = b.Execute(hang, func(ctx context.Context) error {
				close(started)
				<-ctx.Done()
				return ctx.Err()
			})
		}()
		<-started
		probed := time.Now()
		ok := func(context.Context) error { return nil }
		for time.Since(probed) <= time.Second {
			require.ErrorIs(t, b.Execute(context.Background(), ok), breaker.ErrTooManyRequests, "the probe is out, not overdue yet")
			time.Sleep(50 * time.Millisecond)
		}
		require.NoError(t, b.Execute(context.Background(), ok), "another probe goes")
		require.Equal(t, resilience.StateClosed, b.State())
	})
}

// TestReview20AnOverdueProbeStillCountsWhenItAnswers: the first probe's
// late answer counts (a slow dependency closes the breaker on it), and
// probes keep their cadence, one each 10 open timeouts, while none has.
func TestReview20AnOverdueProbeStillCountsWhenItAnswers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("dep", breaker.OpenTimeout(10*time.Millisecond))
		for b.State() != resilience.StateOpen {
			_ = b.Execute(context.Background(), func(context.Context) error { return errors.New("503") })
		}
		time.Sleep(20 * time.Millisecond)
		slow := func(context.Context) error { time.Sleep(250 * time.Millisecond); return nil }
		var admitted atomic.Int32
		for range 25 { // every 10 ms for 250 ms: the first probe, then one each 100 ms
			go func() {
				_ = b.Execute(context.Background(), func(ctx context.Context) error {
					admitted.Add(1)
					return slow(ctx)
				})
			}()
			time.Sleep(10 * time.Millisecond)
		}
		require.EqualValues(t, 3, admitted.Load(), "at 0, about 100 and about 200 ms")
		time.Sleep(300 * time.Millisecond)
		require.Equal(t, resilience.StateClosed, b.State(), "the first probe's answer, at 250 ms, closed it")
	})
}

// TestReview20AnOverdueProbeEndingExcludedFreesNoSecondSlot, from the
// review of the overdue probe: probe A hangs, B goes once A is overdue,
// then A's caller cancels. A, excluded, freed a slot a second time, and a
// third probe went while B had been out 1 ms.
func TestReview20AnOverdueProbeEndingExcludedFreesNoSecondSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 10 * time.Millisecond
		b := breaker.New("dep", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(timeout))
		_ = b.Execute(context.Background(), func(context.Context) error { return errors.New("503") })
		time.Sleep(timeout + time.Millisecond)
		require.Equal(t, resilience.StateHalfOpen, b.State())

		hang := make(chan struct{})
		var wg sync.WaitGroup
		defer wg.Wait()
		defer close(hang)
		ctxA, cancelA := context.WithCancel(context.Background())
		aDone := make(chan error, 1)
		go func() {
			aDone <- b.Execute(ctxA, func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })
		}()
		synctest.Wait()
		time.Sleep(10*timeout + time.Millisecond)
		wg.Go(func() { // B, once A is overdue; it hangs too
			_ = b.Execute(context.Background(), func(context.Context) error { <-hang; return nil })
		})
		synctest.Wait()
		time.Sleep(time.Millisecond)
		cancelA()
		require.ErrorIs(t, <-aDone, context.Canceled)

		ran := false
		err := b.Execute(context.Background(), func(context.Context) error { ran = true; return nil })
		require.False(t, ran, "a third probe went while B had been out 1 ms")
		require.ErrorIs(t, err, breaker.ErrTooManyRequests)
	})
}
