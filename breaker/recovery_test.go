package breaker_test

import (
	"context"
	"math"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// TestProbesKeepTheirCadence: a probe that fails opens the breaker until
// the next moment of its cadence, an open timeout and at most an eighth
// more after the last, whatever the probe's latency up to about half an
// open timeout; NextProbe says that moment, and the moments are the same
// for every such latency. A probe slower to fail opens it for an open
// timeout from the failure.
func TestProbesKeepTheirCadence(t *testing.T) {
	const timeout = 100 * time.Millisecond
	moments := func(t *testing.T, took time.Duration) (at, failed []time.Duration) {
		b := breaker.New("db", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(timeout))
		start := time.Now()
		require.ErrorIs(t, b.Execute(t.Context(), failing(0)), errDown)
		for probe := 1; probe <= 12; probe++ {
			time.Sleep(time.Until(b.NextProbe()))
			require.ErrorIs(t, b.Execute(t.Context(), failing(0)), breaker.ErrOpen, "probe %d: open at the cadence's moment itself", probe)
			at = append(at, time.Since(start))
			time.Sleep(time.Nanosecond)
			require.ErrorIs(t, b.Execute(t.Context(), failing(took)), errDown, "probe %d", probe)
			failed = append(failed, time.Since(start))
		}
		return at, failed
	}
	var fast []time.Duration
	synctest.Test(t, func(t *testing.T) { fast, _ = moments(t, 0) })
	for i, m := range fast {
		prev := time.Duration(0)
		if i > 0 {
			prev = fast[i-1]
		}
		gap := m - prev
		if i > 0 {
			gap -= time.Nanosecond // the probe went a nanosecond past the moment before
		}
		assert.GreaterOrEqual(t, gap, timeout, "moment %d", i+1)
		assert.LessOrEqual(t, gap, timeout+timeout/8, "moment %d", i+1)
	}
	assert.Equal(t, timeout, fast[0], "the first probe an open timeout after opening")
	for _, took := range []time.Duration{time.Millisecond, 20 * time.Millisecond, 37 * time.Millisecond} {
		synctest.Test(t, func(t *testing.T) {
			at, _ := moments(t, took)
			assert.Equal(t, fast, at, "probes taking %v to fail", took)
		})
	}
	for _, took := range []time.Duration{90 * time.Millisecond, 150 * time.Millisecond, 250 * time.Millisecond} {
		synctest.Test(t, func(t *testing.T) {
			at, failed := moments(t, took)
			for i := 1; i < len(at); i++ {
				assert.Equal(t, failed[i-1]+timeout, at[i], "probes taking %v to fail: probe %d an open timeout after the failure before", took, i+1)
			}
		})
	}
}

// TestProbesFindADependencyUpOnABeat: the cadence's drift walks the
// probes across the period of a dependency that is up for a short window
// on a regular beat, a multiple of the open timeout, so that one of them
// lands in a window and closes the breaker.
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

// TestProbationAfterClosing: for 10 open timeouts after the breaker closes
// on its probes after an outage (a probe failed), it takes 5 times the
// failures in a row to open it again; after that, the run it is
// configured with.
func TestProbationAfterClosing(t *testing.T) {
	for _, tc := range []struct {
		name  string
		wait  time.Duration // from closing to the first failure
		trips int           // failures in a row that open it
	}{
		{"just closed", 0, 25},
		{"near the end of probation", 999 * time.Millisecond, 25},
		{"after probation", time.Second, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := breaker.New("db", breaker.OpenTimeout(100*time.Millisecond))
				throughAnOutage(t, b)
				time.Sleep(tc.wait)
				for i := 1; i < tc.trips; i++ {
					require.ErrorIs(t, b.Execute(t.Context(), failing(0)), errDown)
					require.Equal(t, resilience.StateClosed, b.State(), "after %d failures", i)
				}
				require.ErrorIs(t, b.Execute(t.Context(), failing(0)), errDown)
				assert.Equal(t, resilience.StateOpen, b.State(), "after %d failures", tc.trips)
				tr := b.Snapshot().Transitions
				reason := tr[len(tr)-1].Reason
				if tc.trips == 25 {
					assert.Equal(t, "25 consecutive failures, on probation after closing", reason)
				} else {
					assert.Equal(t, "5 consecutive failures", reason)
				}
			})
		})
	}
}

// TestNoProbationAfterABlip: a breaker that never opened, or that closed
// on its first probe (the dependency was down for less than an open
// timeout: a blip, not an outage), opens on its run.
func TestNoProbationAfterABlip(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("db", breaker.OpenTimeout(100*time.Millisecond))
		for range 5 {
			_ = b.Execute(t.Context(), failing(0))
		}
		require.Equal(t, resilience.StateOpen, b.State(), "5 in a row, new")
		time.Sleep(100*time.Millisecond + time.Nanosecond)
		require.NoError(t, b.Execute(t.Context(), succeeding))
		for range 5 {
			_ = b.Execute(t.Context(), failing(0))
		}
		require.Equal(t, resilience.StateOpen, b.State(), "5 in a row after a blip")
	})
}

// TestProbationStartsAnewAfterEachOutage: a breaker that opens on
// probation, fails a probe and closes again is on a new probation.
func TestProbationStartsAnewAfterEachOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("db", breaker.OpenTimeout(100*time.Millisecond))
		throughAnOutage(t, b)
		for range 25 {
			_ = b.Execute(t.Context(), failing(0))
		}
		require.Equal(t, resilience.StateOpen, b.State(), "25 in a row on probation")
		// Opened on probation: its next close starts a new probation, but
		// a failed probe in between does not close it.
		time.Sleep(time.Until(b.NextProbe()) + time.Nanosecond)
		require.ErrorIs(t, b.Execute(t.Context(), failing(0)), errDown)
		require.Equal(t, resilience.StateOpen, b.State())
		time.Sleep(time.Until(b.NextProbe()) + time.Nanosecond)
		require.NoError(t, b.Execute(t.Context(), succeeding))
		for i := range 24 {
			_ = b.Execute(t.Context(), failing(0))
			require.Equal(t, resilience.StateClosed, b.State(), "on a new probation, after %d", i+1)
		}
	})
}

// TestProbationKeepsTheFailureRate: on probation, a failure rate trips
// the breaker as it does otherwise.
func TestProbationKeepsTheFailureRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("db", breaker.ConsecutiveFailures(0), breaker.FailureRate(0.5, 4), breaker.OpenTimeout(100*time.Millisecond))
		for range 4 {
			_ = b.Execute(t.Context(), failing(0))
		}
		require.Equal(t, resilience.StateOpen, b.State())
		time.Sleep(100*time.Millisecond + time.Nanosecond)
		require.ErrorIs(t, b.Execute(t.Context(), failing(0)), errDown) // a failed probe: an outage
		time.Sleep(time.Until(b.NextProbe()) + time.Nanosecond)
		require.NoError(t, b.Execute(t.Context(), succeeding)) // the probe, which closes it: counts start anew
		require.NoError(t, b.Execute(t.Context(), succeeding))
		require.NoError(t, b.Execute(t.Context(), succeeding))
		_ = b.Execute(t.Context(), failing(0))
		require.Equal(t, resilience.StateClosed, b.State(), "3 calls of 4")
		_ = b.Execute(t.Context(), failing(0))
		assert.Equal(t, resilience.StateOpen, b.State(), "2 failures of 4")
	})
}

// throughAnOutage opens b with 5 failures, fails its first probe and
// closes it on its second: a dependency down for longer than a blip.
func throughAnOutage(t *testing.T, b *breaker.Breaker) {
	t.Helper()
	for range 5 {
		_ = b.Execute(t.Context(), failing(0))
	}
	require.Equal(t, resilience.StateOpen, b.State())
	time.Sleep(time.Until(b.NextProbe()) + time.Nanosecond)
	require.ErrorIs(t, b.Execute(t.Context(), failing(0)), errDown)
	time.Sleep(time.Until(b.NextProbe()) + time.Nanosecond)
	require.NoError(t, b.Execute(t.Context(), succeeding))
	require.Equal(t, resilience.StateClosed, b.State())
}

// failing is an operation that fails with errDown after took.
func failing(took time.Duration) func(context.Context) error {
	return func(context.Context) error {
		time.Sleep(took)
		return errDown
	}
}

func succeeding(context.Context) error { return nil }

// TestProbationWithTheLongestOpenTimeout: an open timeout whose 10 times
// overflow a time.Duration still puts the breaker on probation.
func TestProbationWithTheLongestOpenTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("db", breaker.OpenTimeout(math.MaxInt64/3))
		for range 5 {
			_ = b.Execute(t.Context(), failing(0))
		}
		require.Equal(t, resilience.StateOpen, b.State())
		time.Sleep(math.MaxInt64/3 + 1)
		require.ErrorIs(t, b.Execute(t.Context(), failing(0)), errDown)
		time.Sleep(time.Until(b.NextProbe()) + time.Nanosecond)
		require.NoError(t, b.Execute(t.Context(), succeeding))
		for range 24 {
			_ = b.Execute(t.Context(), failing(0))
		}
		assert.Equal(t, resilience.StateClosed, b.State(), "24 failures on probation")
	})
}
