package resilience_test

import (
	"errors"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/resilience"
)

// selfValue wraps itself, by value; its type is not comparable (a slice).
type selfValue struct{ tags []string }

func (e selfValue) Error() string { return "self value" }
func (e selfValue) Unwrap() error { return e } // meant e.cause: a typo

// freshCopy's Unwrap returns a pointer to a copy of itself: a new error
// at every step, never == to one before (a value receiver's &e).
type freshCopy struct{ msg string }

func (e freshCopy) Error() string { return e.msg }
func (e freshCopy) Unwrap() error { return &e }

var errTarget = errors.New("target")

// bounded runs f and fails if it has not returned within d (f's goroutine
// is left spinning until the test binary exits).
func bounded(t *testing.T, d time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(d):
		t.Errorf("%s: still running after %v (a core spins)", what, d)
	}
}

// Promise: "Acyclic returns err, or, if its tree ... does not end ... an
// error with err's message that wraps nothing: errors.Is, errors.As and
// Classify would walk such a tree for ever."
func TestReview167AcyclicUncomparableSelfWrap(t *testing.T) {
	err := selfValue{tags: []string{"a"}}
	bounded(t, 2*time.Second, "Acyclic+errors.Is of a self-wrapping value of an uncomparable type", func() {
		_ = errors.Is(resilience.Acyclic(err), errTarget)
	})
}

func TestReview167AcyclicFreshPointerChain(t *testing.T) {
	err := freshCopy{msg: "fresh"}
	bounded(t, 2*time.Second, "Acyclic of a chain that makes a new error at every step", func() {
		_ = resilience.Acyclic(err)
	})
}

// A tree that ends but whose joins share branches: 2^n paths of n
// joins. errors.Is walks them all too; Acyclic's promise that it returns
// such a tree "as it is, however wide or however often it holds one
// branch" costs it as long.
func TestReview167AcyclicSharedBranchesDAG(t *testing.T) {
	var err error = errors.New("leaf")
	for range 48 {
		err = errors.Join(err, err)
	}
	bounded(t, 2*time.Second, "Acyclic of 48 nested joins each holding one branch twice", func() {
		_ = resilience.Acyclic(err)
	})
}
