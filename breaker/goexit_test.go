package breaker_test

import (
	"context"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/resilience"
)

func TestProbeThatCallsGoexitReports(t *testing.T) {
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
		assert.Equal(t, resilience.StateOpen, b.State(), "the probe counted as a failure")

		time.Sleep(time.Second + time.Nanosecond)
		require.NoError(t, b.Execute(t.Context(), func(context.Context) error { return nil }), "the next probe runs")
		assert.Equal(t, resilience.StateClosed, b.State())
	})
}
