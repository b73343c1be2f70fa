package resilience

// maxJoins is the deepest nesting of joins (Unwrap() []error) that
// Acyclic walks: a join that holds itself nests for ever.
const maxJoins = 10_000

// Acyclic returns err, or, if its tree (as Unwrap walks it) does not end,
// as that of an error that wraps itself does not, an error with err's
// message that wraps nothing: errors.Is, errors.As and [Classify] would
// walk such a tree for ever. The pipeline gives every error of an
// operation to it before a stage asks anything of that error; code that
// asks those of an error it did not get from a pipeline, such as a
// server's handler's, can do the same (retrysignal and grpcsignal do). A
// chain is known to loop when an error comes back in it (compared with
// ==); a join, when joins nest past maxJoins. A tree that ends, however
// wide or however often it holds one branch, is returned as it is, as is
// an error whose methods panic (recovering them is the asker's part). The
// error given for one that does not end keeps the class its top error
// gives itself (a ResilienceClass method of its own). It is safe for
// concurrent use.
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

// endsSafely reports whether err's tree ends; true if a method panics or
// two errors of it cannot be compared.
func endsSafely(err error) (ok bool) {
	defer func() {
		if recover() != nil {
			ok = true
		}
	}()
	return ends(err, 0)
}

// ends reports whether err's tree ends, joins nested depth deep above it:
// along a chain, a slow walker one step in two behind finds a loop when
// the fast one meets it (Floyd's).
func ends(err error, depth int) bool {
	slow := err
	for step := 0; ; step++ {
		switch u := err.(type) {
		case nil:
			return true
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			if depth >= maxJoins {
				return false
			}
			for _, e := range u.Unwrap() {
				if !ends(e, depth+1) {
					return false
				}
			}
			return true
		default:
			return true
		}
		if step%2 == 1 {
			slow = slow.(interface{ Unwrap() error }).Unwrap()
		}
		if err != nil && err == slow {
			return false
		}
	}
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
