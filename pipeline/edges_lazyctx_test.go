package pipeline

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

var errX = errors.New("parent cause X")

// pair builds the lazy context and the standard one over equivalent parents.
type ctxPair struct {
	lazy      *lazyCtx
	std       context.Context
	stdCancel context.CancelFunc
	cancelP   func(error) // cancels both parents
}

func newPair(withParentCancel bool, d time.Duration, cause error) ctxPair {
	var p1, p2 context.Context = context.Background(), context.Background()
	cancelP := func(error) {}
	if withParentCancel {
		var c1, c2 context.CancelCauseFunc
		p1, c1 = context.WithCancelCause(context.Background())
		p2, c2 = context.WithCancelCause(context.Background())
		cancelP = func(e error) { c1(e); c2(e) }
	}
	dl := time.Now().Add(d)
	std, stop := context.WithDeadlineCause(p2, dl, cause)
	return ctxPair{lazy: newLazyCtx(p1, dl, cause), std: std, stdCancel: stop, cancelP: cancelP}
}

func same(t *testing.T, what string, p ctxPair) {
	t.Helper()
	if got, want := context.Cause(p.lazy), context.Cause(p.std); got != want {
		t.Errorf("%s: context.Cause = %v, want %v (as context.WithDeadlineCause)", what, got, want)
	}
	if got, want := p.lazy.Err(), p.std.Err(); got != want {
		t.Errorf("%s: Err = %v, want %v", what, got, want)
	}
}

// Cause asked first, once the deadline has passed, before anything made the
// inner context.
func TestLazyCauseFirstAfterDeadline(t *testing.T) {
	for _, withParent := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			p := newPair(withParent, time.Second, ErrAttemptTimeout)
			defer p.stdCancel()
			defer p.lazy.end()
			time.Sleep(2 * time.Second)
			same(t, "cause-first parent="+map[bool]string{false: "Background", true: "WithCancelCause"}[withParent], p)
		})
	}
}

// end (the cancel function) before the deadline, asked after it.
func TestLazyEndThenDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPair(false, time.Second, nil)
		p.lazy.end()
		p.stdCancel()
		time.Sleep(2 * time.Second)
		same(t, "ended then deadline passed", p)
	})
}

// end, then the parent is canceled with a cause.
func TestLazyEndThenParentCause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPair(true, time.Hour, nil)
		p.lazy.end()
		p.stdCancel()
		p.cancelP(errX)
		same(t, "ended then parent canceled", p)
	})
}

// Through the pipeline: an operation that keeps to its deadline by reading
// ctx.Deadline (as a gRPC client does when it sends grpc-timeout) and
// returns context.DeadlineExceeded must get the attempt-timeout error.
func TestAttemptTimeoutNotNamed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := New(WithAttemptTimeout(time.Second))
		_, err := Do(context.Background(), p, func(ctx context.Context) (int, error) {
			d, _ := ctx.Deadline()
			time.Sleep(time.Until(d) + time.Millisecond)
			return 0, context.DeadlineExceeded
		})
		if !errors.Is(err, ErrAttemptTimeout) {
			t.Errorf("err = %v, want it to match ErrAttemptTimeout", err)
		}
	})
}
