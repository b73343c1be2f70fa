package resilience_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/resilience"
)

func r55Classify(err error) (c resilience.Class, panicked any, hung bool) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() { panicked = recover() }()
		c = resilience.Classify(err)
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		hung = true
	}
	return
}

func TestReview55_ClassifyEdges(t *testing.T) {
	deep := error(resilience.Rejected(errors.New("root")))
	for range 100000 {
		deep = &r55Wrap{deep}
	}
	deepJoin := error(resilience.Permanent(errors.New("root")))
	for range 10000 {
		deepJoin = r55Join{errors.New("x"), deepJoin}
	}
	cases := []struct {
		name string
		err  error
		want resilience.Class
	}{
		{"join(transient, rejected)", errors.Join(errors.New("refused"), resilience.Rejected(errors.New("mine"))), resilience.ClassRejected},
		{"join(canceled, transient)", errors.Join(errors.New("refused"), context.Canceled), resilience.ClassCanceled},
		{"join(terminal, permanent)", errors.Join(resilience.Terminal(errors.New("t")), resilience.Permanent(errors.New("p"))), resilience.ClassTerminal},
		{"wrapped canceled", fmt.Errorf("x: %w", context.Canceled), resilience.ClassCanceled},
		{"permanent(canceled)", resilience.Permanent(context.Canceled), resilience.ClassPermanent},
		{"retryafter(permanent)", resilience.RetryAfter(resilience.Permanent(errors.New("p")), time.Second), resilience.ClassPermanent},
		{"deep 100k", deep, resilience.ClassRejected},
		{"deep join 10k", deepJoin, resilience.ClassPermanent},
	}
	for _, c := range cases {
		got, p, hung := r55Classify(c.err)
		t.Logf("%-28s class=%v panicked=%v hung=%v", c.name, got, p, hung)
		if hung || p != nil {
			t.Errorf("%s: Classify hung=%v panicked=%v", c.name, hung, p)
		} else if got != c.want {
			t.Errorf("%s: got %v want %v", c.name, got, c.want)
		}
	}
	// errors.Is/As through wrappers
	base := &r55Target{}
	for _, w := range []error{resilience.Rejected(base), resilience.Terminal(base), resilience.Permanent(base), resilience.Unrepeatable(base), resilience.RetryAfter(base, time.Second)} {
		var tgt *r55Target
		if !errors.Is(w, base) || !errors.As(w, &tgt) || w.Error() != base.Error() {
			t.Errorf("%T lost its cause", w)
		}
	}
}

type r55Target struct{}

func (*r55Target) Error() string { return "target" }

type r55Wrap struct{ e error }

func (w *r55Wrap) Error() string { return "w" }
func (w *r55Wrap) Unwrap() error { return w.e }

type r55Join [2]error

func (j r55Join) Error() string   { return "j" }
func (j r55Join) Unwrap() []error { return j[:] }
