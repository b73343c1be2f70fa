package retrypolicy_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// TestErrorClassAllocatesNothing: the class of the error a loop gives up
// with costs no allocation, whichever decides it.
func TestErrorClassAllocatesNothing(t *testing.T) {
	for _, e := range []*retrypolicy.Error{
		{Attempts: 1, Reason: retrypolicy.ErrMaxAttempts, Last: errors.New("503")},
		{Attempts: 1, Reason: resilience.Terminal(errors.New("open")), Last: errors.New("503")},
		{Attempts: 1, Reason: context.Canceled, Last: errors.New("503")},
	} {
		assert.Zero(t, testing.AllocsPerRun(10, func() { _ = resilience.Classify(e) }), "%v", e)
	}
}

// TestRetryIfDoesNotRetryRefusals: an attempt refused before it was sent
// (class rejected) is not retried, whatever RetryIf says; other errors are
// left to it.
func TestRetryIfDoesNotRetryRefusals(t *testing.T) {
	retryAll := retrypolicy.RetryIf(func(error) bool { return true })
	for _, c := range []struct {
		name     string
		err      error
		attempts int
	}{
		{"rejected", resilience.Rejected(errors.New("limit full")), 1},
		{"permanent, RetryIf says retry", resilience.Permanent(errors.New("400")), 3},
		{"transient", errors.New("503"), 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := retrypolicy.New(retryAll, retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(0))
			n := 0
			_, err := retrypolicy.Do(context.Background(), p, func(context.Context) (int, error) { n++; return 0, c.err })
			assert.Error(t, err)
			assert.Equal(t, c.attempts, n)
		})
	}
	// By default, an error whose methods panic is not retried.
	n := 0
	_, _ = retrypolicy.Do(context.Background(), retrypolicy.New(retrypolicy.BaseDelay(0)), func(context.Context) (int, error) {
		n++
		return 0, (*unwrapPanics)(nil)
	})
	assert.Equal(t, 1, n)
}

// unwrapPanics is an error whose Unwrap panics on a nil receiver, as a
// typed nil of a caller's error type may.
type unwrapPanics struct{ err error }

func (e *unwrapPanics) Error() string { return "unwrap panics" }
func (e *unwrapPanics) Unwrap() error { return e.err }
