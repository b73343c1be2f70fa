package breaker_test

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// TestProbeThatCallsGoexitFreesItsSlot: a probe whose op calls
// runtime.Goexit counts neither way; the Goexit goes on, and the next call
// probes at once.
func TestProbeThatCallsGoexitFreesItsSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("dep", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(time.Second))
		_ = b.Execute(t.Context(), func(context.Context) error { return errDown })
		require.Equal(t, resilience.StateOpen, b.State())
		time.Sleep(time.Second + time.Nanosecond)
		require.Equal(t, resilience.StateHalfOpen, b.State())

		exited := make(chan bool)
		go func() {
			ran := false
			defer func() { exited <- ran }()
			_ = b.Execute(t.Context(), func(context.Context) error { runtime.Goexit(); return nil })
			ran = true // never: Goexit goes on
		}()
		assert.False(t, <-exited, "runtime.Goexit went on through the breaker")
		assert.Equal(t, resilience.StateHalfOpen, b.State(), "the probe counted neither way")

		require.NoError(t, b.Execute(t.Context(), func(context.Context) error { return nil }), "the next call probes at once")
		assert.Equal(t, resilience.StateClosed, b.State())
	})
}

// unwrapPanics is an error whose Unwrap panics on a nil receiver, as a
// typed nil of a caller's error type may.
type unwrapPanics struct{ err error }

func (e *unwrapPanics) Error() string { return "unwrap panics" }
func (e *unwrapPanics) Unwrap() error { return e.err }

// TestAnErrorThatPanicsAsItIsCountedIsReturned: an error whose own
// methods panic as the breaker counts it, or a FailIf that panics, counts
// as a failure (as a panic in op), and Execute returns the error, as a
// plain client would, rather than the panic.
func TestAnErrorThatPanicsAsItIsCountedIsReturned(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		opts []breaker.Option
	}{
		{"typed nil", (*unwrapPanics)(nil), nil},
		{"FailIf panics", errors.New("503"), []breaker.Option{breaker.FailIf(func(error) bool { panic("FailIf") })}},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := breaker.New("b", append(c.opts, breaker.ConsecutiveFailures(1))...)
			var err error
			assert.NotPanics(t, func() { err = b.Execute(t.Context(), func(context.Context) error { return c.err }) })
			assert.Equal(t, c.err, err)
			assert.Equal(t, resilience.StateOpen, b.State(), "counted as a failure")
		})
	}
}
