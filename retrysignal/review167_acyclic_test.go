package retrysignal_test

import (
	"errors"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/retrysignal"
)

// r167Self wraps itself by value; not comparable (a map).
type r167Self struct{ fields map[string]string }

func (e r167Self) Error() string { return "validation failed" }
func (e r167Self) Unwrap() error { return e }

// r167Fresh makes a new error at each Unwrap.
type r167Fresh struct{ msg string }

func (e r167Fresh) Error() string { return e.msg }
func (e r167Fresh) Unwrap() error { return &e }

func r167Within(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Errorf("%s: no answer after 2 s (a core spins)", what)
	}
}

// Promise (CHANGELOG review164): Retried, Status and WriteError walk a
// handler's error through resilience.Acyclic: one that wraps itself does
// not hang the handler.
func TestReview167StatusSelfWrapping(t *testing.T) {
	for name, err := range map[string]error{
		"uncomparable value wrapping itself": r167Self{fields: map[string]string{"a": "b"}},
		"new error at each step":             r167Fresh{msg: "fresh"},
		"joined with a nil-free wrapper":     errors.Join(errors.New("x"), r167Self{fields: map[string]string{}}),
	} {
		r167Within(t, name+": Status, Retried, WriteError", func() {
			_ = retrysignal.Status(err)
			_ = retrysignal.Retried(err)
			retrysignal.WriteError(httptest.NewRecorder(), err)
		})
	}
}
