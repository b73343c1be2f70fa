package retrypolicy_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

var review27Open = errors.New("review27: guard says open")

// review27Stopped returns a guard's stop after `after` attempts of a policy
// with MaxAttempts(max).
func review27Stopped(t *testing.T, max, after int) error {
	t.Helper()
	p := retrypolicy.New(retrypolicy.MaxAttempts(max), retrypolicy.BaseDelay(time.Microsecond), retrypolicy.Jitter(retrypolicy.None))
	n := 0
	_, err := retrypolicy.DoGuarded(context.Background(), p, func() error {
		if n >= after {
			return review27Open
		}
		return nil
	}, func(context.Context) (int, error) { n++; return 0, errors.New("connection reset") })
	var re *retrypolicy.Error
	require.ErrorAs(t, err, &re)
	require.Equal(t, after, re.Attempts)
	return err
}

// Resume with a stop made under another policy: MaxAttempts of the policy
// Resume is given should hold ("The attempts already made count towards
// MaxAttempts").
func TestReview27_ResumeOtherPolicyExceedsMaxAttempts(t *testing.T) {
	stopped := review27Stopped(t, 10, 5)
	p := retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Microsecond))
	ran := 0
	_, err := retrypolicy.Resume(context.Background(), p, nil, stopped, func(context.Context) (int, error) {
		ran++
		return 0, errors.New("connection reset")
	})
	var re *retrypolicy.Error
	require.ErrorAs(t, err, &re)
	t.Logf("ran=%d err=%v", ran, err)
	assert.Equal(t, 0, ran, "5 attempts made already of MaxAttempts(3): Resume should send none")
}

// Resume with a wrapped stop (fmt.Errorf %w) is DoGuarded, per the doc, so
// the attempts start again from 1: documented, but easy to trip on.
func TestReview27_ResumeWrappedStopStartsOver(t *testing.T) {
	stopped := review27Stopped(t, 3, 2)
	p := retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(time.Microsecond))
	ran := 0
	_, err := retrypolicy.Resume(context.Background(), p, nil, errorsJoin(stopped), func(context.Context) (int, error) {
		ran++
		return 0, errors.New("connection reset")
	})
	t.Logf("ran=%d err=%v", ran, err)
}

func errorsJoin(err error) error { return errors.Join(err) }

// Resume with a nil stop and nil policy: DoGuarded with the defaults.
func TestReview27_ResumeNil(t *testing.T) {
	ran := 0
	v, err := retrypolicy.Resume(context.Background(), nil, nil, nil, func(context.Context) (int, error) { ran++; return 7, nil })
	require.NoError(t, err)
	assert.Equal(t, 7, v)
	assert.Equal(t, 1, ran)
}

// Resume of a canceled context sends nothing and keeps the count.
func TestReview27_ResumeCanceled(t *testing.T) {
	stopped := review27Stopped(t, 3, 1)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ran := 0
	_, err := retrypolicy.Resume(ctx, nil, nil, stopped, func(context.Context) (int, error) { ran++; return 0, nil })
	var re *retrypolicy.Error
	require.ErrorAs(t, err, &re)
	assert.Equal(t, 0, ran)
	assert.Equal(t, 1, re.Attempts)
	assert.ErrorIs(t, err, context.Canceled)
}

// Resume's op panics: the panic propagates, nothing swallowed.
func TestReview27_ResumePanics(t *testing.T) {
	stopped := review27Stopped(t, 3, 1)
	assert.PanicsWithValue(t, "boom", func() {
		_, _ = retrypolicy.Resume(context.Background(), nil, nil, stopped, func(context.Context) (int, error) { panic("boom") })
	})
}
