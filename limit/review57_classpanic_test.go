package limit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// nilErr is a typed error whose methods dereference its receiver: a nil
// *nilErr returned as an error (a classic Go bug) panics when classified.
type nilErr struct{ inner error }

func (e *nilErr) Error() string { return e.inner.Error() }
func (e *nilErr) Unwrap() error { return e.inner }

// classPanics is an error whose ResilienceClass panics.
type classPanics struct{}

func (classPanics) Error() string                     { return "class panics" }
func (classPanics) ResilienceClass() resilience.Class { panic("ResilienceClass boom") }

func review57ReleasePanics(t *testing.T, l *limit.Limiter, err error) {
	t.Helper()
	tk, aerr := l.Acquire(context.Background())
	if aerr != nil {
		t.Fatal(aerr)
	}
	func() {
		defer func() { t.Logf("Release panicked: %v", recover()) }()
		l.Release(tk, err)
	}()
	// After a caller recovered that panic (as net/http does for a
	// handler), the limiter must still work.
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		tk, err := l.Acquire(ctx)
		if err == nil {
			l.Release(tk, nil)
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Acquire after the recovered panic: %v", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatalf("Acquire hangs after Release panicked classifying the error: the limiter's mutex is held forever (InFlight would hang too)")
	}
}

func TestReview57ReleaseWithPanickingErrorAIMD(t *testing.T) {
	var e *nilErr
	review57ReleasePanics(t, limit.NewAIMD(), e)
}

func TestReview57ReleaseWithPanickingClassAIMD(t *testing.T) {
	review57ReleasePanics(t, limit.NewAIMD(), classPanics{})
}

func TestReview57ReleaseWithPanickingErrorFixed(t *testing.T) {
	var e *nilErr
	review57ReleasePanics(t, limit.NewFixed(2), e)
}

var _ = errors.New
