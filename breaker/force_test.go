package breaker_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/internal/testwait"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// modeEvents collects the mode changes a listener hears.
type modeEvents struct{ changes []*breaker.ModeChange }

func (m *modeEvents) OnEvent(e resilience.Event) {
	var mc *breaker.ModeChange
	if e.Kind == resilience.EventStateChange && errors.As(e.Err, &mc) {
		m.changes = append(m.changes, mc)
	}
}

func TestForcedOpenFailsFastSayingSoAndNormalRestores(t *testing.T) {
	var heard modeEvents
	b := breaker.New("payments", breaker.WithListener(&heard))
	d := &dependency{}
	require.NoError(t, b.SetMode(t.Context(), breaker.ForcedOpen, "alice"))

	err := b.Execute(t.Context(), d.call)
	assert.ErrorIs(t, err, breaker.ErrOpen, "code that handles an open breaker handles a forced one")
	assert.ErrorIs(t, err, breaker.ErrForcedOpen)
	assert.Contains(t, err.Error(), "forced open by alice")
	assert.Equal(t, resilience.ClassTerminal, resilience.Classify(err))
	assert.Zero(t, d.calls.Load(), "the dependency saw no call")
	assert.Equal(t, resilience.StateOpen, b.State())
	assert.ErrorIs(t, b.Check(), breaker.ErrForcedOpen, "a retry loop stops")

	require.NoError(t, b.SetMode(t.Context(), breaker.Normal, "bob"))
	require.NoError(t, b.Execute(t.Context(), d.call))
	assert.EqualValues(t, 1, d.calls.Load())
	assert.Equal(t, resilience.StateClosed, b.State())
	assert.NoError(t, b.Check())

	require.Len(t, heard.changes, 2)
	assert.Equal(t, breaker.ModeChange{From: breaker.Normal, To: breaker.ForcedOpen, By: "alice"}, *heard.changes[0])
	assert.Equal(t, breaker.ModeChange{From: breaker.ForcedOpen, To: breaker.Normal, By: "bob"}, *heard.changes[1])
	assert.Equal(t, "bob", b.Mode().By)
}

// failThrough sets b's mode m and makes n calls to a dependency that is
// down: each must reach it.
func failThrough(t *testing.T, b *breaker.Breaker, m breaker.Mode, n int) {
	t.Helper()
	d := &dependency{}
	d.down.Store(true)
	require.NoError(t, b.SetMode(t.Context(), m, "oncall"))
	for range n {
		assert.ErrorIs(t, b.Execute(t.Context(), d.call), errDown)
	}
	assert.EqualValues(t, n, d.calls.Load(), "every call goes through")
}

func TestForcedClosedLetsEveryCallThroughAndCountsThem(t *testing.T) {
	b := breaker.New("search", breaker.ConsecutiveFailures(1))
	failThrough(t, b, breaker.ForcedClosed, 10) // a false alarm
	s := b.Snapshot()
	assert.Equal(t, resilience.StateClosed, s.State)
	assert.Equal(t, breaker.ForcedClosed, s.Mode.Mode)
	assert.EqualValues(t, 10, s.Counts.TotalFailures)
	assert.InDelta(t, 1.0, s.FailureRate, 1e-9)

	require.NoError(t, b.SetMode(t.Context(), breaker.Normal, "oncall"))
	_ = b.Execute(t.Context(), func(context.Context) error { return errDown })
	assert.Equal(t, resilience.StateOpen, b.State(), "back to Normal, the thresholds apply again")
}

func TestDisabledCountsAndChangesStateButRejectsNothing(t *testing.T) {
	b := breaker.New("geo", breaker.ConsecutiveFailures(2))
	failThrough(t, b, breaker.Disabled, 6) // nothing is rejected
	s := b.Snapshot()
	assert.Equal(t, resilience.StateOpen, s.Own, "the breaker underneath opened: metrics only")
	assert.NoError(t, b.Check(), "retries are not stopped")
}

// opened returns a breaker opened by a failure, for an hour, and its
// rejection of the next call.
func opened(t *testing.T) (*breaker.Breaker, error) {
	b := breaker.New("x", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(time.Hour))
	_ = b.Execute(t.Context(), func(context.Context) error { return errDown })
	rejected := b.Execute(t.Context(), func(context.Context) error { return nil })
	require.ErrorIs(t, rejected, breaker.ErrOpen)
	return b, rejected
}

// waitInBackground starts a Wait without a deadline and checks that it
// waits.
func waitInBackground(t *testing.T, b *breaker.Breaker, rejected error) <-chan error {
	done := make(chan error, 1)
	go func() { done <- b.Wait(t.Context(), rejected) }()
	synctest.Wait()
	select {
	case err := <-done:
		t.Fatalf("Wait returned %v while the breaker is open for an hour", err)
	default:
	}
	return done
}

// A breaker forced open fails fast also for calls that wait for an open
// breaker (pipeline.WaitWhenOpen), deadline or not: nothing is worth
// waiting for.
func TestForcedOpenIsNotWaitedFor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, rejected := opened(t)
		done := waitInBackground(t, b, rejected)

		start := time.Now()
		require.NoError(t, b.SetMode(t.Context(), breaker.ForcedOpen, "alice"))
		require.NoError(t, testwait.Within(t, done), "the waiting call goes, to be rejected")
		forced := b.Execute(t.Context(), func(context.Context) error { return nil })
		assert.ErrorIs(t, forced, breaker.ErrForcedOpen)

		err := b.Wait(t.Context(), rejected)
		assert.ErrorIs(t, err, breaker.ErrForcedOpen, "no wait, and the error says forced open")
		assert.Contains(t, err.Error(), "forced open by alice")
		ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
		defer cancel()
		assert.Equal(t, forced, b.Wait(ctx, forced))
		assert.Zero(t, time.Since(start), "nobody waited")

		// Back to Normal, the breaker is open as it was: calls wait again.
		require.NoError(t, b.SetMode(t.Context(), breaker.Normal, "alice"))
		done = waitInBackground(t, b, rejected)
		require.NoError(t, b.SetMode(t.Context(), breaker.ForcedClosed, "alice"))
		assert.NoError(t, testwait.Within(t, done))
	})
}

// Forced closed or disabled, a breaker rejects nothing: the calls that
// wait for it go at once, and no call waits.
func TestForcedClosedOrDisabledLetsTheWaitingCallsGo(t *testing.T) {
	for _, m := range []breaker.Mode{breaker.ForcedClosed, breaker.Disabled} {
		t.Run(m.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b, rejected := opened(t)
				done := waitInBackground(t, b, rejected)
				start := time.Now()
				require.NoError(t, b.SetMode(t.Context(), m, "alice"))
				assert.NoError(t, testwait.Within(t, done))
				assert.NoError(t, b.Wait(t.Context(), rejected), "nothing to wait for")
				assert.Zero(t, time.Since(start), "not at the open timeout")
			})
		})
	}
}

func TestSnapshotTellsTransitionsWithReasonsAndNextProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("inventory", breaker.ConsecutiveFailures(3), breaker.OpenTimeout(10*time.Second))
		d := &dependency{}
		d.down.Store(true)
		for range 3 {
			_ = b.Execute(t.Context(), d.call)
		}
		s := b.Snapshot()
		assert.Equal(t, resilience.StateOpen, s.State)
		assert.Equal(t, 10*time.Second, s.NextProbe)
		time.Sleep(4 * time.Second)
		assert.Equal(t, 6*time.Second, b.Snapshot().NextProbe)
		time.Sleep(6*time.Second + time.Nanosecond)
		d.down.Store(false)
		require.NoError(t, b.Execute(t.Context(), d.call))
		s = b.Snapshot()
		var reasons []string
		for _, tr := range s.Transitions {
			reasons = append(reasons, fmt.Sprintf("%v->%v: %s", tr.From, tr.To, tr.Reason))
		}
		assert.Equal(t, []string{
			"closed->open: 3 consecutive failures",
			"open->half-open: open for 10s: probing",
			"half-open->closed: 1 probe(s) succeeded",
		}, reasons)
		assert.Zero(t, s.NextProbe)
	})
}

func TestSnapshotFailureRateReason(t *testing.T) {
	b := breaker.New("rated", breaker.ConsecutiveFailures(0), breaker.FailureRate(0.5, 4))
	d := &dependency{}
	for i := range 4 {
		d.down.Store(i%2 == 1)
		_ = b.Execute(t.Context(), d.call)
	}
	s := b.Snapshot()
	require.Len(t, s.Transitions, 1)
	assert.Equal(t, "failure rate 50% of 4 calls >= 50%", s.Transitions[0].Reason)
}

func TestSnapshotKeepsTheLastTransitions(t *testing.T) {
	b := breaker.New("busy")
	for i := range breaker.MaxTransitions + 5 {
		m := breaker.ForcedOpen
		if i%2 == 1 {
			m = breaker.Normal
		}
		require.NoError(t, b.SetMode(t.Context(), m, fmt.Sprint(i)))
	}
	tr := b.Snapshot().Transitions
	require.Len(t, tr, breaker.MaxTransitions)
	assert.Contains(t, tr[len(tr)-1].Reason, fmt.Sprint(breaker.MaxTransitions+4), "the newest last")
	assert.Contains(t, tr[0].Reason, " by 5", "the oldest kept")
}

func TestModeStringsParse(t *testing.T) {
	for _, m := range []breaker.Mode{breaker.Normal, breaker.ForcedOpen, breaker.ForcedClosed, breaker.Disabled} {
		got, err := breaker.ParseMode(m.String())
		require.NoError(t, err)
		assert.Equal(t, m, got)
	}
	_, err := breaker.ParseMode("open")
	assert.Error(t, err)
}

// TestForcedClosedCountsAPanicAsNormalDoes: forced closed, a call whose
// op panics or calls runtime.Goexit is a request left out, as in Normal
// mode, and the panic goes on.
func TestForcedClosedCountsAPanicAsNormalDoes(t *testing.T) {
	b := breaker.New("search")
	require.NoError(t, b.SetMode(t.Context(), breaker.ForcedClosed, "oncall"))
	assert.PanicsWithValue(t, "bug", func() {
		_ = b.Execute(t.Context(), func(context.Context) error { panic("bug") })
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = b.Execute(t.Context(), func(context.Context) error { runtime.Goexit(); return nil })
	}()
	<-done
	c := b.Snapshot().Counts
	assert.EqualValues(t, 2, c.Requests)
	assert.EqualValues(t, 2, c.TotalExclusions)
	assert.Zero(t, c.TotalFailures+c.TotalSuccesses)
}
