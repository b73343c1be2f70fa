package limit_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/resiliencekit/resiliencekit/limit"
)

// backlog queues one waiter every 2.5 ms for 1 s, each with a budget of
// 1 s, behind the 4 slots of l, held all along; then frees them. Each
// waiter granted holds its slot 10 ms (a dependency back at once, 400
// answers a second). It returns how many were granted, in fake time.
func backlog(l *limit.Limiter) int64 {
	var held []limit.Ticket
	for range 4 {
		tk, _ := l.Acquire(context.Background())
		held = append(held, tk)
	}
	var granted atomic.Int64
	var wg sync.WaitGroup
	for range 400 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			tk, err := l.Acquire(ctx)
			if err == nil {
				granted.Add(1)
				time.Sleep(10 * time.Millisecond)
				l.Release(tk, nil)
			}
		})
		time.Sleep(2500 * time.Microsecond)
	}
	for _, tk := range held {
		l.Release(tk, nil)
	}
	wg.Wait()
	return granted.Load()
}

// TestABacklogIsServedBeforeItsDeadlines: a second of waiters queued
// behind a dependency that was down, then back with the capacity to
// answer them as fast as they came. Their deadlines pass as fast as the
// limiter can serve them: served newest first once the oldest is late
// (the default), it meets the oldest still waiting halfway (200 of 400);
// with OldestOnTime, served oldest first among those with time enough for
// an answer, only those that waited four fifths of their budget are left
// out (319), twice, 10 s apart.
func TestABacklogIsServedBeforeItsDeadlines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := limit.NewFixed(4, limit.MaxWaiting(1000), limit.OldestOnTime())
		first := backlog(l)
		time.Sleep(10 * time.Second)
		second := backlog(l)
		newest := backlog(limit.NewFixed(4, limit.MaxWaiting(1000)))
		t.Logf("granted of 400: %d, then %d; newest first: %d", first, second, newest)
		assert.GreaterOrEqual(t, first, int64(300))
		assert.GreaterOrEqual(t, second, int64(300))
		assert.InDelta(t, 200, newest, 10)
	})
}

// TestASlowDependencyIsServedInTimeFromAStandingQueue: a bulkhead of 10
// in front of a dependency that answers in 300 ms (33 a second), called
// 100 times a second with a budget of 1 s: the queue stands at the whole
// budget. With OldestOnTime, a waiter that has a quarter of its wait left
// is not late by that rule alone, but sent with 200 ms left it runs out
// before its answer, and so would every one after it: the limiter serves
// only waiters with more time left than the answers take, which it
// measures, so that nearly every attempt it sends is answered in time.
func TestASlowDependencyIsServedInTimeFromAStandingQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := limit.NewFixed(10, limit.MaxWaiting(1000), limit.OldestOnTime())
		var sent, answered atomic.Int64
		var wg sync.WaitGroup
		for range 2000 { // 20 s
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				tk, err := l.Acquire(ctx)
				if err != nil {
					return
				}
				sent.Add(1)
				select {
				case <-time.After(300 * time.Millisecond):
					answered.Add(1)
					l.Release(tk, nil)
				case <-ctx.Done():
					l.Release(tk, ctx.Err())
				}
			})
			time.Sleep(10 * time.Millisecond)
		}
		wg.Wait()
		t.Logf("sent %d, answered in time %d (the dependency can answer about 700 in the 21 s)", sent.Load(), answered.Load())
		assert.GreaterOrEqual(t, answered.Load(), int64(600))
		assert.GreaterOrEqual(t, answered.Load(), sent.Load()*9/10)
	})
}
