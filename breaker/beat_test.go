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

// TestProbesFindADependencyUpOnABeat: a breaker's probes do not lock onto
// the period of a dependency that is up for a short window on a regular
// beat, a multiple of the open timeout: one of them lands in a window and
// closes the breaker. A probe cadence fixed from when the breaker opened
// (tried, and taken out) never closed it on the first of these beats.
func TestProbesFindADependencyUpOnABeat(t *testing.T) {
	for _, beat := range []struct{ up, period time.Duration }{
		{50 * time.Millisecond, 500 * time.Millisecond},
		{50 * time.Millisecond, time.Second},
		{30 * time.Millisecond, 300 * time.Millisecond},
		{10 * time.Millisecond, 200 * time.Millisecond},
	} {
		synctest.Test(t, func(t *testing.T) {
			b := breaker.New("db", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(100*time.Millisecond))
			start := time.Now()
			up := func() bool { return time.Since(start)%beat.period < beat.up }
			call := func(context.Context) error {
				if up() {
					return nil
				}
				return errDown
			}
			time.Sleep(beat.up) // down
			_ = b.Execute(t.Context(), call)
			closes := 0
			for time.Since(start) < 20*time.Second {
				time.Sleep(time.Until(b.NextProbe()) + time.Millisecond)
				_ = b.Execute(t.Context(), call)
				if b.State() == resilience.StateClosed {
					closes++
					time.Sleep(beat.period - time.Since(start)%beat.period + time.Millisecond) // down again
					_ = b.Execute(t.Context(), call)
				}
			}
			assert.GreaterOrEqual(t, closes, 5, "up %v of every %v: closes in 20 s", beat.up, beat.period)
		})
	}
}
