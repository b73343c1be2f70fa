package breaker_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// answerIn is a dependency that answers in d, or ends with its context.
func answerIn(d time.Duration) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		select {
		case <-time.After(d):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// hang is a dependency that never answers.
func hang(ctx context.Context) error {
	<-ctx.Done()
	return ctx.Err()
}

// within calls b's Execute with op under a deadline of d.
func within(b *breaker.Breaker, d time.Duration, op func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return b.Execute(ctx, op)
}

// A caller's deadline shorter than the dependency's answers (the budget a
// caller upstream sends) ends its calls: the breaker does not count them,
// and stays closed for the calls with time enough. A dependency that hangs
// is still counted by the calls that had the time its answers take.
func TestACallersDeadlineShorterThanTheAnswersDoesNotCount(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("dep") // opens after 5 failures in a row
		for range 20 {
			require.NoError(t, within(b, time.Second, answerIn(30*time.Millisecond)))
		}
		for range 50 {
			err := within(b, 5*time.Millisecond, answerIn(30*time.Millisecond))
			require.ErrorIs(t, err, context.DeadlineExceeded)
		}
		assert.Equal(t, resilience.StateClosed, b.State())
		assert.Zero(t, b.Counts().TotalFailures)
		assert.EqualValues(t, 50, b.Counts().TotalExclusions)
		require.NoError(t, within(b, time.Second, answerIn(30*time.Millisecond)), "a call with time enough goes through")

		// The dependency hangs: calls with more time than its answers
		// took count, and open the breaker.
		for range 5 {
			require.ErrorIs(t, within(b, 150*time.Millisecond, hang), context.DeadlineExceeded)
		}
		assert.Equal(t, resilience.StateOpen, b.State())
	})
}

// Which calls ended by their caller's deadline count, after answers of
// 30 ms (or none).
func TestWhichCallsEndedByTheirDeadlineCount(t *testing.T) {
	for _, tc := range []struct {
		name     string
		answered bool
		deadline time.Duration
		op       func(ctx context.Context) error
		counts   bool
	}{
		{"under 100 ms", true, 99 * time.Millisecond, hang, false},
		{"longer than the answers and 100 ms", true, 100 * time.Millisecond, hang, true},
		{"before any answer, under 100 ms", false, 99 * time.Millisecond, hang, false},
		{"before any answer, 100 ms", false, 100 * time.Millisecond, hang, true},
		{"an error of the dependency's, not the deadline", true, 5 * time.Millisecond, func(context.Context) error { return errUnavailable }, true},
		{"a retry policy's one attempt", true, 20 * time.Millisecond, func(ctx context.Context) error {
			return retried(ctx, 1)
		}, false},
		{"a retry policy's second attempt: the first failed", true, 20 * time.Millisecond, func(ctx context.Context) error {
			return retried(ctx, 2)
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := breaker.New("dep", breaker.ConsecutiveFailures(1))
				if tc.answered {
					require.NoError(t, within(b, time.Second, answerIn(30*time.Millisecond)))
				}
				require.Error(t, within(b, tc.deadline, tc.op))
				if tc.counts {
					assert.Equal(t, resilience.StateOpen, b.State(), "opens on 1 failure")
				} else {
					assert.Equal(t, resilience.StateClosed, b.State())
					assert.EqualValues(t, 1, b.Counts().TotalExclusions)
				}
			})
		})
	}
}

var errUnavailable = errors.New("503 service unavailable")

// retried is a retry policy's error for a call whose attempt n the
// deadline of ctx ended.
func retried(ctx context.Context, n int) error {
	<-ctx.Done()
	return &retrypolicy.Error{Attempts: n, Last: ctx.Err(), Reason: retrypolicy.ErrOutOfTime}
}

// Answers of other calls meanwhile hide nothing: a call that had more
// time than any answer took counts.
func TestAnswersOfOtherCallsDoNotHideAHang(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("dep", breaker.ConsecutiveFailures(1))
		require.NoError(t, within(b, time.Second, answerIn(30*time.Millisecond)))
		go func() { _ = within(b, time.Second, answerIn(200*time.Millisecond)) }()
		require.ErrorIs(t, within(b, 500*time.Millisecond, hang), context.DeadlineExceeded)
		assert.Equal(t, resilience.StateOpen, b.State())
	})
}

// Answers slower than a call's budget make it the caller's doing; a fast
// answer does not lower the bar under 100 ms.
func TestTheBarIsTheSlowestAnswerAnd100ms(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("dep", breaker.ConsecutiveFailures(1))
		require.NoError(t, within(b, time.Second, answerIn(time.Microsecond)))
		require.Error(t, within(b, 5*time.Millisecond, hang))
		assert.Equal(t, resilience.StateClosed, b.State(), "under 100 ms, after a fast answer")
		require.NoError(t, within(b, time.Second, answerIn(300*time.Millisecond)))
		require.Error(t, within(b, 200*time.Millisecond, hang))
		assert.Equal(t, resilience.StateClosed, b.State(), "under the 300 ms answer")
		require.Error(t, within(b, 301*time.Millisecond, hang))
		assert.Equal(t, resilience.StateOpen, b.State(), "more than any answer took")
	})
}

// The slowest answer of the last minute is what a call's time is compared
// with: once it is older, a call with less time counts.
func TestTheSlowestAnswerCountsForAMinute(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("dep", breaker.ConsecutiveFailures(1))
		require.NoError(t, within(b, time.Minute, answerIn(2*time.Second)))
		require.Error(t, within(b, time.Second, hang))
		assert.Equal(t, resilience.StateClosed, b.State(), "1 s is less than the 2 s answer")
		time.Sleep(55 * time.Second)
		require.Error(t, within(b, time.Second, hang))
		assert.Equal(t, resilience.StateClosed, b.State(), "the 2 s answer is under a minute old")
		time.Sleep(25 * time.Second)
		require.Error(t, within(b, time.Second, hang))
		assert.Equal(t, resilience.StateOpen, b.State(), "the 2 s answer is over 80 s old")
	})
}
