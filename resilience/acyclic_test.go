package resilience_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/resiliencekit/resiliencekit/resilience"
)

// selfWrap is an error whose Unwrap, by a bug, returns itself.
type selfWrap struct{}

func (e *selfWrap) Error() string { return "self" }
func (e *selfWrap) Unwrap() error { return e }

// joinLoop is a join whose second branch is itself.
type joinLoop struct{ first error }

func (e *joinLoop) Error() string   { return "join loop" }
func (e *joinLoop) Unwrap() []error { return []error{e.first, e} }

// wrapper wraps err, with its message.
type wrapper struct{ err error }

func (e *wrapper) Error() string { return e.err.Error() }
func (e *wrapper) Unwrap() error { return e.err }

// nilUnwrap is a typed nil whose Unwrap dereferences it.
type nilUnwrap struct{ err error }

func (e *nilUnwrap) Error() string { return "typed nil" }
func (e *nilUnwrap) Unwrap() error { return e.err }

func TestAcyclic(t *testing.T) {
	deep := error(errors.New("leaf"))
	for range 10_000 {
		deep = &wrapper{deep}
	}
	var typedNil *nilUnwrap
	tests := []struct {
		name string
		err  error
		same bool // returned as it is
	}{
		{"nil", nil, true},
		{"plain", errors.New("x"), true},
		{"joined", errors.Join(errors.New("a"), fmt.Errorf("b: %w", errors.New("c"))), true},
		{"10,000 deep", deep, true},
		{"Unwrap panics", fmt.Errorf("w: %w", typedNil), true},
		{"wraps itself", &selfWrap{}, false},
		{"wrapped, wraps itself", fmt.Errorf("w: %w", &selfWrap{}), false},
		{"a join that holds itself", &joinLoop{errors.New("a")}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := resilience.Acyclic(tc.err)
			if tc.same {
				assert.True(t, tc.err == got)
				return
			}
			assert.False(t, tc.err == got)
			assert.Equal(t, tc.err.Error(), got.Error())
			assert.Nil(t, errors.Unwrap(got), "wraps nothing")
			assert.False(t, errors.Is(got, errors.ErrUnsupported), "errors.Is returns")
		})
	}
}
