package breaker_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// A rare call at a half-open fleet waits for the flush that asks for its
// probe; if its context ends first, it returns the context's error, not
// a rejection (review91): the caller gave up, the breaker did not refuse.
func TestRareCallWhoseContextEndsMeanwhile(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &slowStore52{memStore: newMemStore(), lat: 50 * time.Millisecond}
		b := breaker.New("rare-ctx", breaker.Shared(st), breaker.FlushInterval(100*time.Millisecond),
			breaker.FailureRate(0.5, 5), breaker.ConsecutiveFailures(1000),
			breaker.OpenTimeout(time.Second), breaker.HalfOpenRequests(1))
		defer b.Close()
		open52(t, b)
		time.Sleep(3*time.Second + 50*time.Millisecond) // quiet; half-open
		synctest.Wait()
		assert.Equal(t, resilience.StateHalfOpen, b.FleetState())
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
		defer cancel()
		ran := false
		err := b.Execute(ctx, func(context.Context) error { ran = true; return nil })
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.False(t, breaker.IsRejection(err), "%v", err)
		assert.False(t, ran)
		// The flush it asked for grants this replica the probe: the next
		// call runs it.
		time.Sleep(100 * time.Millisecond)
		assert.NoError(t, b.Execute(t.Context(), func(context.Context) error { return nil }))
	})
}

// A rare call whose context ends while the flusher is busy with a
// periodic flush, before the flush it asked for has started: that flush
// still asks for the probe, and the next call runs it (it asked for none,
// and the next call was refused).
func TestRareCallWhoseContextEndsBeforeItsFlush(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const every = 100 * time.Millisecond
		st := &slowStore52{memStore: newMemStore(), lat: 50 * time.Millisecond}
		b := breaker.New("rare-busy", breaker.Shared(st), breaker.FlushInterval(every),
			breaker.FailureRate(0.5, 5), breaker.ConsecutiveFailures(1000),
			breaker.OpenTimeout(time.Second), breaker.HalfOpenRequests(1))
		defer b.Close()
		start := time.Now()
		open52(t, b)
		time.Sleep(3*time.Second - time.Since(start)) // a periodic flush starts now, for 50 ms
		synctest.Wait()
		assert.Equal(t, resilience.StateHalfOpen, b.FleetState())
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
		defer cancel()
		err := b.Execute(ctx, func(context.Context) error { return nil })
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		time.Sleep(every)
		assert.NoError(t, b.Execute(t.Context(), func(context.Context) error { return nil }))
	})
}
