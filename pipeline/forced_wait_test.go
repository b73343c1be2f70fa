package pipeline_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/internal/testwait"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/pipeline"
)

// waitingCall starts a call through p, whose breaker is open for an hour,
// and checks that it waits (WaitWhenOpen, no deadline).
func waitingCall(t *testing.T, p *pipeline.Pipeline) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := pipeline.Do(t.Context(), p, func(context.Context) (int, error) { return 1, nil })
		done <- err
	}()
	synctest.Wait()
	select {
	case err := <-done:
		t.Fatalf("the call did not wait: %v", err)
	default:
	}
	return done
}

// openFor opens a breaker for an hour and returns a WaitWhenOpen pipeline
// on it.
func openFor(t *testing.T) (*breaker.Breaker, *pipeline.Pipeline) {
	b := breaker.New("dep", breaker.ConsecutiveFailures(1), breaker.OpenTimeout(time.Hour))
	_ = b.Execute(t.Context(), func(context.Context) error { return errors.New("boom") })
	return b, pipeline.New(pipeline.WithBreaker(b), pipeline.WaitWhenOpen())
}

// The issue: "a forced open rejects calls (fail fast, an error that says
// forced open)", also through a pipeline that waits for an open breaker:
// a new call fails at once, and the calls already waiting fail as soon as
// it is forced, not when the operator changes the mode (hours later, the
// calls piled up meanwhile).
func TestForcedOpenFailsFastThroughWaitWhenOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, p := openFor(t)
		waiting := waitingCall(t, p)
		start := time.Now()
		require.NoError(t, b.SetMode(t.Context(), breaker.ForcedOpen, "alice"))
		err := testwait.Within(t, waiting)
		assert.ErrorIs(t, err, breaker.ErrForcedOpen)
		assert.ErrorContains(t, err, "forced open by alice")

		_, err = pipeline.Do(t.Context(), p, func(context.Context) (int, error) { return 1, nil })
		assert.ErrorIs(t, err, breaker.ErrForcedOpen)
		assert.ErrorIs(t, err, breaker.ErrOpen)
		assert.Zero(t, time.Since(start), "nothing waited")
	})
}

// Forced closed (a false alarm) or disabled, the calls waiting for the
// open breaker go through at once, not at the end of its open timeout.
func TestForcedClosedOrDisabledLetsWaitingCallsThrough(t *testing.T) {
	for _, m := range []breaker.Mode{breaker.ForcedClosed, breaker.Disabled} {
		t.Run(m.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b, p := openFor(t)
				waiting := waitingCall(t, p)
				start := time.Now()
				require.NoError(t, b.SetMode(t.Context(), m, "alice"))
				assert.NoError(t, testwait.Within(t, waiting))
				assert.Zero(t, time.Since(start))
			})
		})
	}
}
