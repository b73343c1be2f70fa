package limit_test

// These tests come from review 38 of the queue order "oldest on time
// first". Each simulation runs a workload through the Limiter and holds
// it to failing no more calls than the former rule (adaptive LIFO) failed
// on the same workload, measured before that rule was removed, give or
// take a few; the others hold its accounting (no slot lost or granted
// twice), its fast path and how fast late waiters leave.

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/resiliencekit/resiliencekit/limit"
)

// r38Fixed returns a bulkhead of n that queues up to waiting callers.
func r38Fixed(n, waiting int) *limit.Limiter {
	return limit.NewFixed(n, limit.MaxWaiting(waiting), limit.OldestOnTime())
}

// r38Stats counts the outcomes of a simulation.
type r38Stats struct {
	ok, timedOut, expiredWaiting, refused atomic.Int64
}

func (s *r38Stats) failed() int64 {
	return s.timedOut.Load() + s.expiredWaiting.Load() + s.refused.Load()
}

// r38Call is one call: it waits for a slot within its deadline (0: none),
// then holds it for serve() (the dependency's answer time, read when it
// is sent), or until its deadline, whichever comes first.
func r38Call(l *limit.Limiter, s *r38Stats, budget time.Duration, serve func(sent time.Time) time.Duration) {
	ctx := context.Background()
	if budget > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, budget)
		defer cancel()
	}
	tk, err := l.Acquire(ctx)
	if err != nil {
		if ctx.Err() != nil {
			s.expiredWaiting.Add(1)
		} else {
			s.refused.Add(1)
		}
		return
	}
	d := serve(time.Now())
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		s.ok.Add(1)
		l.Release(tk, nil)
	case <-ctx.Done():
		s.timedOut.Add(1)
		l.Release(tk, context.DeadlineExceeded)
	}
}
