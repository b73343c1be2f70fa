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
// the next moment of its cadence, every open timeout from when it opened,
// however long the probe took to fail; NextProbe says that moment, and
// Wait lets its waiter go then.
func TestProbesKeepTheirCadence(t *testing.T) {
	for _, took := range []time.Duration{0, 30 * time.Millisecond, 99 * time.Millisecond, 100 * time.Millisecond, 150 * time.Millisecond, 250 * time.Millisecond} {
		t.Run(took.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const timeout = 100 * time.Millisecond
				b := breaker.New("db", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(timeout))
				start := time.Now()
				require.ErrorIs(t, b.Execute(t.Context(), failing(0)), errDown)
				for probe := 1; probe <= 3; probe++ {
					// The probe goes at the first moment past the cadence's.
					time.Sleep(time.Until(b.NextProbe()))
					require.ErrorIs(t, b.Execute(t.Context(), failing(0)), breaker.ErrOpen, "probe %d: open at the cadence's moment itself", probe)
					time.Sleep(time.Nanosecond)
					sent := time.Since(start)
					require.ErrorIs(t, b.Execute(t.Context(), failing(took)), errDown, "probe %d", probe)
					failed := time.Since(start)
					want := (failed/timeout + 1) * timeout // the next moment of the cadence after the failure
					assert.Equal(t, start.Add(want), b.NextProbe(), "probe %d, sent at %v, failed at %v", probe, sent, failed)
					assert.GreaterOrEqual(t, want+time.Nanosecond-sent, timeout, "probe %d: sent at the cadence's moment, the next goes an open timeout later at the earliest", probe)
				}
			})
		})
	}
}

// TestAWaiterGoesAtTheCadence: a call waiting for an open breaker is let
// go as the probe at the cadence's next moment, not an open timeout after
// the probe before it failed.
func TestAWaiterGoesAtTheCadence(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("db", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(100*time.Millisecond))
		start := time.Now()
		require.ErrorIs(t, b.Execute(t.Context(), failing(0)), errDown)
		time.Sleep(100*time.Millisecond + time.Nanosecond)
		require.ErrorIs(t, b.Execute(t.Context(), failing(40*time.Millisecond)), errDown)
		err := b.Execute(t.Context(), failing(0))
		require.ErrorIs(t, err, breaker.ErrOpen)
		require.NoError(t, b.Wait(t.Context(), err))
		assert.Equal(t, 200*time.Millisecond+time.Nanosecond, time.Since(start).Round(time.Nanosecond), "let go past 200 ms, not 240 ms")
		assert.Equal(t, resilience.StateHalfOpen, b.State())
	})
}

// TestProbationAfterClosing: for 10 open timeouts after the breaker closes
// on its probes after an outage (a probe failed), it takes 3 times the
// failures in a row to open it again; after that, the run it is
// configured with.
func TestProbationAfterClosing(t *testing.T) {
	for _, tc := range []struct {
		name  string
		wait  time.Duration // from closing to the first failure
		trips int           // failures in a row that open it
	}{
		{"just closed", 0, 15},
		{"near the end of probation", 999 * time.Millisecond, 15},
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
				if tc.trips == 15 {
					assert.Equal(t, "15 consecutive failures, on probation after closing", reason)
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
		for range 15 {
			_ = b.Execute(t.Context(), failing(0))
		}
		require.Equal(t, resilience.StateOpen, b.State(), "15 in a row on probation")
		// Opened on probation: its next close starts a new probation, but
		// a failed probe in between does not close it.
		time.Sleep(time.Until(b.NextProbe()) + time.Nanosecond)
		require.ErrorIs(t, b.Execute(t.Context(), failing(0)), errDown)
		require.Equal(t, resilience.StateOpen, b.State())
		time.Sleep(time.Until(b.NextProbe()) + time.Nanosecond)
		require.NoError(t, b.Execute(t.Context(), succeeding))
		for i := range 14 {
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
		time.Sleep(100 * time.Millisecond)
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
		time.Sleep(math.MaxInt64 / 3)
		require.NoError(t, b.Execute(t.Context(), succeeding))
		for range 14 {
			_ = b.Execute(t.Context(), failing(0))
		}
		assert.Equal(t, resilience.StateClosed, b.State(), "14 failures on probation")
	})
}
