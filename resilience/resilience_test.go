package resilience_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/resiliencekit/resiliencekit/resilience"
)

var errBase = errors.New("boom")

type selfClassed struct{}

func (selfClassed) Error() string                     { return "self" }
func (selfClassed) ResilienceClass() resilience.Class { return resilience.ClassPermanent }

// claims is an error that gives itself class c, which may be one no error
// can have.
type claims struct{ c resilience.Class }

func (claims) Error() string                       { return "claims" }
func (e claims) ResilienceClass() resilience.Class { return e.c }

// isCanceled says it is context.Canceled without wrapping it.
type isCanceled struct{}

func (isCanceled) Error() string        { return "is canceled" }
func (isCanceled) Is(target error) bool { return target == context.Canceled }

// notComparable is an error type that == would panic on, if compared with
// one of its own type.
type notComparable struct{ parts []string }

func (notComparable) Error() string { return "parts" }

func TestClassify(t *testing.T) {
	tests := []struct {
		name      string
		err       error
		want      resilience.Class
		permanent bool
	}{
		{"nil", nil, resilience.ClassSuccess, false},
		{"plain", errBase, resilience.ClassTransient, false},
		{"timeout", context.DeadlineExceeded, resilience.ClassTransient, false},
		{"canceled", context.Canceled, resilience.ClassCanceled, false},
		{"wrapped canceled", fmt.Errorf("get: %w", context.Canceled), resilience.ClassCanceled, false},
		{"permanent", resilience.Permanent(errBase), resilience.ClassPermanent, true},
		{"wrapped permanent", fmt.Errorf("charge: %w", resilience.Permanent(errBase)), resilience.ClassPermanent, true},
		{"terminal is not the caller's fault", resilience.Terminal(errBase), resilience.ClassTerminal, false},
		{"self-classed", selfClassed{}, resilience.ClassPermanent, true},
		{"retry-after keeps the class", resilience.RetryAfter(resilience.Permanent(errBase), time.Second), resilience.ClassPermanent, true},
		{"outermost mark wins", resilience.Terminal(resilience.Permanent(errBase)), resilience.ClassTerminal, false},
		{"a mark beats canceled", errors.Join(context.Canceled, resilience.Permanent(errBase)), resilience.ClassPermanent, true},
		{"joined canceled", errors.Join(errBase, context.Canceled), resilience.ClassCanceled, false},
		{"canceled by its Is method", isCanceled{}, resilience.ClassCanceled, false},
		{"wrapped Is method", fmt.Errorf("op: %w", isCanceled{}), resilience.ClassCanceled, false},
		{"not comparable", notComparable{}, resilience.ClassTransient, false},
		{"a new error with canceled's text", errors.New(context.Canceled.Error()), resilience.ClassTransient, false},
		{"an error is never a success", claims{resilience.ClassSuccess}, resilience.ClassTransient, false},
		{"wrapped claim of success", fmt.Errorf("op: %w", claims{resilience.ClassSuccess}), resilience.ClassTransient, false},
		{"a claim of success beside canceled", errors.Join(claims{}, context.Canceled), resilience.ClassCanceled, false},
		{"a class with no name", claims{resilience.ClassPending + 1}, resilience.ClassTransient, false},
		{"pending", claims{resilience.ClassPending}, resilience.ClassPending, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, resilience.Classify(tt.err))
			assert.Equal(t, tt.permanent, resilience.IsPermanent(tt.err))
		})
	}
}

func TestMarksKeepTheCause(t *testing.T) {
	for _, err := range []error{resilience.Permanent(errBase), resilience.Terminal(errBase), resilience.RetryAfter(errBase, time.Second)} {
		assert.ErrorIs(t, err, errBase)
		assert.Equal(t, "boom", err.Error())
	}
	assert.NoError(t, resilience.Permanent(nil))
	assert.NoError(t, resilience.Terminal(nil))
	assert.NoError(t, resilience.RetryAfter(nil, time.Second))
}

func TestRetryAfterHint(t *testing.T) {
	d, ok := resilience.RetryAfterHint(fmt.Errorf("call: %w", resilience.RetryAfter(errBase, 3*time.Second)))
	assert.True(t, ok)
	assert.Equal(t, 3*time.Second, d)

	d, ok = resilience.RetryAfterHint(resilience.RetryAfter(errBase, -time.Second))
	assert.True(t, ok)
	assert.Zero(t, d)

	_, ok = resilience.RetryAfterHint(errBase)
	assert.False(t, ok)
}

func TestClassMethods(t *testing.T) {
	tests := []struct {
		class     resilience.Class
		name      string
		retryable bool
		failure   bool
	}{
		{resilience.ClassSuccess, "success", false, false},
		{resilience.ClassTransient, "transient", true, true},
		{resilience.ClassPermanent, "permanent", false, false},
		{resilience.ClassTerminal, "terminal", false, true},
		{resilience.ClassCanceled, "canceled", false, false},
		{resilience.Class(99), "unknown", false, false},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.name, tt.class.String())
		assert.Equal(t, tt.retryable, tt.class.Retryable(), tt.name)
		assert.Equal(t, tt.failure, tt.class.Failure(), tt.name)
	}
}

func ExampleClassify() {
	errInvalid := resilience.Permanent(errors.New("card declined"))
	for _, err := range []error{
		errors.New("connection reset"),
		fmt.Errorf("charge: %w", errInvalid),
		context.Canceled,
	} {
		c := resilience.Classify(err)
		fmt.Printf("%v: %s, retry %v, breaker failure %v\n", err, c, c.Retryable(), c.Failure())
	}
	// Output:
	// connection reset: transient, retry true, breaker failure true
	// charge: card declined: permanent, retry false, breaker failure false
	// context canceled: canceled, retry false, breaker failure false
}

func TestUnrepeatable(t *testing.T) {
	err := resilience.Unrepeatable(errors.New("stream past its replay buffer"))
	assert.Equal(t, resilience.ClassTerminal, resilience.Classify(err))
	assert.True(t, resilience.IsUnrepeatable(fmt.Errorf("call: %w", err)))
	assert.False(t, resilience.IsUnrepeatable(resilience.Terminal(errors.New("500"))))
	assert.Nil(t, resilience.Unrepeatable(nil))
}

// TestClassOf: the class an error was given, if any, without allocating;
// none for the ones Classify falls back on.
func TestClassOf(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want resilience.Class
		ok   bool
	}{
		{"nil", nil, 0, false},
		{"plain", errBase, 0, false},
		{"canceled", context.Canceled, 0, false},
		{"rejected", resilience.Rejected(errBase), resilience.ClassRejected, true},
		{"wrapped terminal", fmt.Errorf("x: %w", resilience.Terminal(errBase)), resilience.ClassTerminal, true},
		{"in a join", errors.Join(errBase, resilience.Permanent(errBase)), resilience.ClassPermanent, true},
		{"self-classed", selfClassed{}, resilience.ClassPermanent, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, ok := resilience.ClassOf(tt.err)
			assert.Equal(t, tt.want, c)
			assert.Equal(t, tt.ok, ok)
			assert.Zero(t, testing.AllocsPerRun(10, func() { _, _ = resilience.ClassOf(tt.err) }))
		})
	}
}
