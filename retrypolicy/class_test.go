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
