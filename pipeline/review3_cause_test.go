package pipeline

import (
	"context"
	"testing"
	"time"
)

// context.Cause of the attempt's context once its deadline passed, asked
// before anything else: WithDeadlineCause's context answers
// ErrAttemptTimeout. A lazy one not yet made passes Value to its parent,
// and Cause finds the caller's own cancelCtx, whose cause is nil.
func TestReview3CauseFirstAfterDeadline(t *testing.T) {
	p := New(WithAttemptTimeout(time.Millisecond))
	parent, cancel := context.WithCancel(context.Background())
	defer cancel()
	var cause, err error
	_, _ = Do(parent, p, func(ctx context.Context) (int, error) {
		time.Sleep(5 * time.Millisecond)
		cause = context.Cause(ctx)
		err = ctx.Err()
		return 0, nil
	})
	if cause != ErrAttemptTimeout || err != context.DeadlineExceeded {
		t.Errorf("after the attempt timeout: context.Cause %v, Err %v; want %v, %v", cause, err, ErrAttemptTimeout, context.DeadlineExceeded)
	}
}
