package breaker_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// The review's tests: IgnoreIf, set for another purpose (a 404), used to
// replace what is always left out. A caller that cancels, whose client
// then reports an error of its own, counted against a healthy
// dependency; an outcome of class rejected counted as a success, and a
// probe never sent closed the breaker.

func TestReview20IgnoreIfKeepsTheCallersCancellationsOut(t *testing.T) {
	errNotFound := errors.New("404")
	b := breaker.New("dep", breaker.IgnoreIf(func(err error) bool { return errors.Is(err, errNotFound) }))
	for range 5 {
		ctx, cancel := context.WithCancel(context.Background())
		_ = b.Execute(ctx, func(ctx context.Context) error {
			cancel() // the caller gives up mid-call
			return errors.New("read tcp: use of closed network connection")
		})
	}
	require.Equal(t, resilience.StateClosed, b.State(), "the caller's cancellations opened the breaker")
	require.Zero(t, b.Counts().TotalFailures)
}

func TestReview20IgnoreIfKeepsARejectedProbeOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("dep", breaker.IgnoreIf(func(err error) bool { return false }))
		for b.State() != resilience.StateOpen {
			_ = b.Execute(context.Background(), func(context.Context) error { return errors.New("503") })
		}
		time.Sleep(200 * time.Millisecond) // past OpenTimeout
		_ = b.Execute(context.Background(), func(context.Context) error {
			return resilience.Rejected(errors.New("client-side throttle: not sent"))
		})
		require.Equal(t, resilience.StateHalfOpen, b.State(), "closed by a probe that was never sent")
	})
}
