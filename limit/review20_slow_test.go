package limit_test

// From the third review of the queue's order. A rule that an attempt which
// waited longer than it had left teaches the adaptive limit nothing hid a
// dependency turning slower than the callers' budgets behind a standing
// queue: the limit stayed at 20 for ten minutes, sending 46 times the
// load (35,788 attempts, none answered), and an overloaded dependency
// answered 1,228 calls in time of 17,956. The rule is gone; these hold
// the limit to falling.

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

// simSlow drives callers with a budget of 1s, one every 10ms, against a
// dependency that never answers within any caller's budget (latency 5s):
// every attempt fails with context.DeadlineExceeded. It returns the
// limit after run, and how many attempts were sent (in flight) at most
// during the last minute.
func simSlow(t *testing.T, waiting int, run time.Duration) (lim, maxInFlight int, sent int64) {
	var l *limit.Limiter
	if waiting > 0 {
		l = limit.NewAIMD(limit.Initial(20), limit.MaxWaiting(waiting))
	} else {
		l = limit.NewAIMD(limit.Initial(20))
	}
	var wg sync.WaitGroup
	var n atomic.Int64
	end := time.Now().Add(run)
	for time.Now().Before(end) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			tk, err := l.Acquire(ctx)
			if err != nil {
				return
			}
			n.Add(1)
			select { // the dependency: 5s, past every budget
			case <-time.After(5 * time.Second):
				l.Release(tk, nil)
			case <-ctx.Done():
				l.Release(tk, ctx.Err())
			}
		}()
		time.Sleep(10 * time.Millisecond)
		if time.Until(end) < time.Minute {
			maxInFlight = max(maxInFlight, l.InFlight())
		}
	}
	wg.Wait()
	return l.Limit(), maxInFlight, n.Load()
}

// Held: a dependency slower than every budget from the start. The queue
// builds up while the limit falls (early waiters have not waited out), and
// once late the newest go first (not waited out): the limit reaches Min,
// with or without MaxWaiting.
func TestReview20CASlowDependencyHoldsTheLimitAtItsMinimum(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim0, inf0, sent0 := simSlow(t, 0, 10*time.Minute)
		limQ, infQ, sentQ := simSlow(t, 40, 10*time.Minute)
		t.Logf("no queue:      limit %d, in flight (last minute, max) %d, attempts sent %d (every one timed out)", lim0, inf0, sent0)
		t.Logf("MaxWaiting 40: limit %d, in flight (last minute, max) %d, attempts sent %d (every one timed out)", limQ, infQ, sentQ)
		assert.LessOrEqual(t, limQ, 2*lim0+2, "an adaptive limit must fall against a dependency that times out every attempt")
	})
}

// simSwitch: callers with a 1s budget, one every 10ms. The dependency
// answers in healthy, until slowAt; then in 5s, past every budget.
func simSwitch(t *testing.T, opts []limit.Option, healthy time.Duration, slowAt, run time.Duration) (limits []int, sentSlow, okSlow int64) {
	l := limit.NewAIMD(opts...)
	var wg sync.WaitGroup
	var sent, ok atomic.Int64
	start := time.Now()
	for time.Since(start) < run {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			tk, err := l.Acquire(ctx)
			if err != nil {
				return
			}
			lat := healthy
			slow := time.Since(start) >= slowAt
			if slow {
				lat = 5 * time.Second
				sent.Add(1)
			}
			select {
			case <-time.After(lat):
				l.Release(tk, nil)
				if slow {
					ok.Add(1)
				}
			case <-ctx.Done():
				l.Release(tk, ctx.Err())
			}
		}()
		time.Sleep(10 * time.Millisecond)
		if d := time.Since(start); d%time.Minute < 10*time.Millisecond {
			limits = append(limits, l.Limit())
		}
	}
	wg.Wait()
	return limits, sent.Load(), ok.Load()
}

// The dependency is healthy (300ms) and the limit is at its Max (20) with
// a standing queue (MaxWaiting 40, ~0.6s of the 1s budget); then it turns
// slower than every budget (5s). Every attempt sent from then on times
// out, and every one was granted from the queue after waiting more than
// it had left: none teaches the limit anything. It stays at 20 for the
// next 10 minutes: 20 hopeless attempts in flight, for ever. Without the
// queue (MaxWaiting 0) the same falls to Min within seconds.
func TestReview20CTheLimitFallsWhenTheDependencyTurnsSlow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		limQ, sentQ, okQ := simSwitch(t, []limit.Option{limit.Initial(20), limit.Max(20), limit.MaxWaiting(40)}, 300*time.Millisecond, time.Minute, 11*time.Minute)
		lim0, sent0, ok0 := simSwitch(t, []limit.Option{limit.Initial(20), limit.Max(20)}, 300*time.Millisecond, time.Minute, 11*time.Minute)
		t.Logf("MaxWaiting 40: limit each minute %v; after the switch %d attempts sent, %d answered", limQ, sentQ, okQ)
		t.Logf("MaxWaiting 0:  limit each minute %v; after the switch %d attempts sent, %d answered", lim0, sent0, ok0)
		assert.LessOrEqual(t, limQ[len(limQ)-1], 2, "the limit must fall against a dependency that times out every attempt")
	})
}

// An overloaded dependency whose latency grows with the load it is given
// (25ms per attempt in flight: it serves 40 a second whatever the
// concurrency). Callers: 1s budget, 100 a second, MaxWaiting 40, default
// NewAIMD (Max 1000).
func TestReview20CAnOverloadedDependencyIsAnsweredInTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		run := func(waiting int) (lims []int, sent, ok int64) {
			opts := []limit.Option{limit.Initial(20)}
			if waiting > 0 {
				opts = append(opts, limit.MaxWaiting(waiting))
			}
			l := limit.NewAIMD(opts...)
			var wg sync.WaitGroup
			var s, o atomic.Int64
			start := time.Now()
			for time.Since(start) < 5*time.Minute {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ctx, cancel := context.WithTimeout(context.Background(), time.Second)
					defer cancel()
					tk, err := l.Acquire(ctx)
					if err != nil {
						return
					}
					s.Add(1)
					select {
					case <-time.After(time.Duration(l.InFlight()) * 25 * time.Millisecond):
						l.Release(tk, nil)
						o.Add(1)
					case <-ctx.Done():
						l.Release(tk, ctx.Err())
					}
				}()
				time.Sleep(10 * time.Millisecond)
				if d := time.Since(start); d%time.Minute < 10*time.Millisecond {
					lims = append(lims, l.Limit())
				}
			}
			wg.Wait()
			return lims, s.Load(), o.Load()
		}
		lq, sq, oq := run(40)
		l0, s0, o0 := run(0)
		t.Logf("MaxWaiting 40: limit each minute %v; sent %d, answered in time %d", lq, sq, oq)
		t.Logf("MaxWaiting 0:  limit each minute %v; sent %d, answered in time %d", l0, s0, o0)
		assert.GreaterOrEqual(t, oq, o0/2, "a queue must not cut the calls answered in time tenfold")
	})
}
