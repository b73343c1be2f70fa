package resilience

import "reflect"

// maxErrors is the most errors of a tree that Acyclic walks, counted
// along each path: a tree with more is taken for one that does not end.
const maxErrors = 1 << 20

// Acyclic returns err, or, if its tree (as Unwrap walks it) does not end,
// as that of an error that wraps itself does not, an error with err's
// message that wraps nothing: errors.Is, errors.As and [Classify] would
// walk such a tree for ever. The pipeline gives every error of an
// operation to it before a stage asks anything of that error; code that
// asks those of an error it did not get from a pipeline, such as a
// server's handler's, can do the same (retrysignal and grpcsignal do). A
// chain is known to loop when an error comes back in it (compared with
// ==); a tree in which more than 2^20 errors are walked, counted along
// each path, is taken for one that does not end: a chain that makes a new
// error at each step, one of errors that cannot be compared, a join that
// holds itself, or joins that share a branch so often that errors.Is
// would walk it for ages (a join of a join of one error, 48 deep, has
// 2^48 paths). A tree that ends within that is returned as it is, as is
// an error whose methods panic (recovering them is the asker's part). An
// Is or As method that calls errors.Is or errors.As on its own error is
// beyond it: that overflows the stack of any errors.Is, the asker's own
// too. The error given for one that does not end keeps the class its top
// error gives itself (a ResilienceClass method of its own). It is safe
// for concurrent use.
func Acyclic(err error) error {
	switch err.(type) {
	case nil:
		return nil
	case interface{ Unwrap() error }, interface{ Unwrap() []error }:
		if !endsSafely(err) {
			return endless{err}
		}
	}
	return err
}

// endsSafely reports whether err's tree ends; true if a method panics.
func endsSafely(err error) (ok bool) {
	defer func() {
		if recover() != nil {
			ok = true
		}
	}()
	left := maxErrors
	return ends(err, &left)
}

// loopsFrom is how far along a chain the walk starts to look for a loop:
// chains are short, and a loop is found all the same a little later.
const loopsFrom = 64

// ends reports whether err's tree ends within left more errors walked:
// along a chain, from loopsFrom on, a slow walker one step in two behind
// finds a loop when the fast one meets it (Floyd's).
func ends(err error, left *int) bool {
	var slow error
	for step := 0; ; step++ {
		if *left--; *left < 0 {
			return false
		}
		switch u := err.(type) {
		case nil:
			return true
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if !ends(e, left) {
					return false
				}
			}
			return true
		default:
			return true
		}
		switch {
		case step < loopsFrom:
			continue
		case step == loopsFrom:
			slow = err
		case (step-loopsFrom)%2 == 0:
			slow = slow.(interface{ Unwrap() error }).Unwrap()
		}
		if err != nil && step > loopsFrom && same(err, slow) {
			return false
		}
	}
}

// same reports whether a and b are one error: false for two that cannot
// be compared, whose loop the count of errors walked ends.
func same(a, b error) (eq bool) {
	if t := reflect.TypeOf(a); t != reflect.TypeOf(b) || !t.Comparable() {
		return false // without a panic to recover: a loop of them walks the whole bound
	}
	defer func() {
		if recover() != nil {
			eq = false
		}
	}()
	return a == b
}

// endless stands for an error whose tree does not end: its message, the
// class its top error gives itself, and nothing to unwrap.
type endless struct{ err error }

func (e endless) Error() string { return e.err.Error() }

// ResilienceClass returns the class the top error gives itself, or
// transient.
func (e endless) ResilienceClass() Class {
	if c, ok := e.err.(interface{ ResilienceClass() Class }); ok {
		return c.ResilienceClass()
	}
	return ClassTransient
}
