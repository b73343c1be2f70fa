package classify_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/resiliencekit/resiliencekit/internal/classify"
	"github.com/resiliencekit/resiliencekit/resilience"
)

type unwrapPanics struct{ err error }

func (e *unwrapPanics) Error() string { return "unwrap panics" }
func (e *unwrapPanics) Unwrap() error { return e.err }

type classPanics struct{}

func (classPanics) Error() string                     { return "class panics" }
func (classPanics) ResilienceClass() resilience.Class { panic("class") }

func TestSafely(t *testing.T) {
	for _, c := range []struct {
		err   error
		class resilience.Class
		ok    bool
	}{
		{nil, resilience.ClassSuccess, true},
		{errors.New("503"), resilience.ClassTransient, true},
		{context.Canceled, resilience.ClassCanceled, true},
		{resilience.Rejected(errors.New("full")), resilience.ClassRejected, true},
		{(*unwrapPanics)(nil), 0, false},
		{classPanics{}, 0, false},
	} {
		class, ok := classify.Safely(c.err)
		assert.Equal(t, c.ok, ok, "%T", c.err)
		assert.Equal(t, c.class, class, "%T", c.err)
	}
}

func TestHolds(t *testing.T) {
	assert.True(t, classify.Holds(resilience.IsUnrepeatable, resilience.Unrepeatable(errors.New("sent"))))
	assert.False(t, classify.Holds(resilience.IsUnrepeatable, errors.New("503")))
	assert.False(t, classify.Holds(resilience.IsUnrepeatable, (*unwrapPanics)(nil)))
	assert.False(t, classify.Holds(func(error) bool { panic("test") }, nil))
}

func TestRetryAfter(t *testing.T) {
	d, ok := classify.RetryAfter(resilience.RetryAfter(errors.New("429"), 3))
	assert.True(t, ok)
	assert.Equal(t, time.Duration(3), d)
	_, ok = classify.RetryAfter(errors.New("503"))
	assert.False(t, ok)
	_, ok = classify.RetryAfter((*unwrapPanics)(nil))
	assert.False(t, ok)
}
