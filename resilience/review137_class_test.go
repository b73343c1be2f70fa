package resilience_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/resiliencekit/resiliencekit/resilience"
)

// sdkError is an integration's typed error whose class was left unset (the
// zero value, ClassSuccess), wrapping the answer it got.
type sdkError struct {
	class resilience.Class
	err   error
}

func (e *sdkError) Error() string                     { return "sdk: " + e.err.Error() }
func (e *sdkError) Unwrap() error                     { return e.err }
func (e *sdkError) ResilienceClass() resilience.Class { return e.class }

// An error that claims no class ("counts as none") must let the first error
// in its chain WITH a class decide, as the doc says: a 400 (permanent)
// wrapped in an SDK error with an unset class must not become transient
// (retried 4 times, a breaker failure against a healthy dependency).
func TestReview137UnsetClassHidesInnerClass(t *testing.T) {
	for _, inner := range []struct {
		err  error
		want resilience.Class
	}{
		{resilience.Permanent(errors.New("400 bad request")), resilience.ClassPermanent},
		{resilience.Rejected(errors.New("bad url")), resilience.ClassRejected},
		{resilience.Terminal(errors.New("500")), resilience.ClassTerminal},
	} {
		for _, bad := range []resilience.Class{resilience.ClassSuccess, 200} {
			err := &sdkError{class: bad, err: fmt.Errorf("call: %w", inner.err)}
			if got := resilience.Classify(err); got != inner.want {
				t.Errorf("Classify(sdkError{%v} wrapping %v) = %v, want %v (the first error in the chain with a class)", bad, inner.want, got, inner.want)
			}
			if got, ok := resilience.ClassOf(err); !ok || got != inner.want {
				t.Errorf("ClassOf(sdkError{%v} wrapping %v) = %v,%v, want %v,true", bad, inner.want, got, ok, inner.want)
			}
		}
	}
}
