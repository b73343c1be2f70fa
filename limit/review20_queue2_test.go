package limit_test

// From the second review of the queue's order. With the oldest waiter
// served until it was late (a fifth of its budget left), an adaptive limit
// after an outage still learned failures from attempts granted with less
// time left than the dependency takes (400 ms of a 1 s budget): it stayed
// near 10 and served 43% of the calls (first come first served alone: 13%,
// limit 3 or 4). Such an attempt, which waited longer than it had left,
// now teaches nothing. And the late queue's scan for the latest deadline
// made the limiter the bottleneck (27,934 of 30,000 waiters failed); the
// newest is taken at once now.

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

type aimdResult struct {
	okAfter, failAfter, limitedAfter int64
	limitAt                          []int
}

// zzAIMD drives n closed-loop clients (budget b, a pause of think between
// calls) through an AIMD limiter with MaxWaiting(w), to a dependency that
// answers in lat, after a black-hole outage of outage (attempts hang until
// the caller's deadline). It counts outcomes in [outage+settle, end).
func zzAIMD(t *testing.T, n, w int, b, lat, think, outage, settle, end time.Duration) aimdResult {
	var res aimdResult
	synctest.Test(t, func(t *testing.T) {
		l := limit.NewAIMD(limit.MaxWaiting(w))
		start := time.Now()
		var ok, fail, limited atomic.Int64
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				for time.Since(start) < end {
					ctx, cancel := context.WithTimeout(context.Background(), b)
					count := time.Since(start) >= outage+settle
					tk, err := l.Acquire(ctx)
					if err != nil {
						if count {
							limited.Add(1)
						}
						cancel()
						time.Sleep(think)
						continue
					}
					if time.Since(start) < outage {
						<-ctx.Done()
						err = ctx.Err()
					} else {
						tm := time.NewTimer(lat)
						select {
						case <-tm.C:
						case <-ctx.Done():
							err = ctx.Err()
						}
						tm.Stop()
					}
					l.Release(tk, err)
					cancel()
					if count {
						if err == nil {
							ok.Add(1)
						} else {
							fail.Add(1)
						}
					}
					time.Sleep(think)
				}
			})
		}
		wg.Go(func() {
			for time.Since(start) < end {
				time.Sleep(time.Second)
				res.limitAt = append(res.limitAt, l.Limit())
			}
		})
		wg.Wait()
		res.okAfter, res.failAfter, res.limitedAfter = ok.Load(), fail.Load(), limited.Load()
	})
	return res
}

// TestReview20AnAdaptiveLimitWithAQueueRecoversAfterAnOutage: 50 callers in a closed loop, each
// with a 50 ms budget, to a dependency that answers every call in 20 ms
// once a 5 s black-hole outage is over. A plain client completes every
// call (20 ms < 50 ms), and the dependency serves any concurrency. Through
// NewAIMD(MaxWaiting(100)), 30 to 60 s after the outage, the limit is
// still ~10 (50 would serve everyone at once) and about half the calls
// fail: queued attempts granted with less than 20 ms left time out, each
// timeout a Failure that cuts the limit, which lengthens the queue.
func TestReview20AnAdaptiveLimitWithAQueueRecoversAfterAnOutage(t *testing.T) {
	for _, c := range []struct{ b, lat, outage time.Duration }{
		{time.Second, 400 * time.Millisecond, 5 * time.Second},
		{time.Second, 400 * time.Millisecond, 0}, // control: no outage, no problem
	} {
		r := zzAIMD(t, 50, 100, c.b, c.lat, time.Millisecond, c.outage, 60*time.Second-c.outage, 120*time.Second)
		tot := r.okAfter + r.failAfter + r.limitedAfter
		t.Logf("budget %v latency %v outage %v: from 60 s to 120 s: %d calls, %d ok, %d timed out after admission, %d ErrLimited; limit at 60..120 s: %v",
			c.b, c.lat, c.outage, tot, r.okAfter, r.failAfter, r.limitedAfter, r.limitAt[59:])
		assert.Equal(t, tot, r.okAfter, "a healthy dependency (400 ms < 1 s budget): every call completes without the limiter")
		assert.GreaterOrEqual(t, r.limitAt[len(r.limitAt)-1], 50, "the limit recovers to the load")
	}
}

// TestReview20ALateQueueDrainsAsFastAsAnOnTimeOne: n waiters queue behind
// one slot of a limiter (MaxWaiting n) to a dependency that answers at
// once. Without deadlines (first come first served: the head is never
// late) the limiter drains the queue in fd. With deadlines that leave
// each waiter 3*fd when the slot frees, after waiting 5 times that (so
// the head is late), every grant scans the whole queue for the latest
// deadline, and most waiters run out of budget in the queue, which
// first come first served would have drained three times over.
func TestReview20ALateQueueDrainsAsFastAsAnOnTimeOne(t *testing.T) {
	n := 30000
	if zzRace {
		n = 10000
	}
	drain := func(budget, wait time.Duration) (time.Duration, int) {
		t0 := time.Now()
		l := limit.NewFixed(1, limit.MaxWaiting(n))
		tk, _ := l.Acquire(context.Background())
		var wg sync.WaitGroup
		var failed atomic.Int64
		start := make(chan struct{})
		for range n {
			wg.Go(func() {
				ctx, cancel := context.Background(), func() {}
				if budget > 0 {
					ctx, cancel = context.WithDeadline(ctx, t0.Add(budget))
				}
				defer cancel()
				t, err := l.Acquire(ctx)
				if err != nil {
					failed.Add(1)
					return
				}
				<-start
				l.Release(t, nil)
			})
		}
		for l.Waiting() < n {
			time.Sleep(time.Millisecond)
		}
		time.Sleep(time.Until(t0.Add(wait)))
		close(start)
		t1 := time.Now()
		l.Release(tk, nil)
		wg.Wait()
		return time.Since(t1), int(failed.Load())
	}
	fd, ff := drain(0, 0)
	t.Logf("no deadlines (FCFS): %d waiters drained in %v, %d failed", n, fd, ff)
	left := max(3*fd, 200*time.Millisecond)
	ld, lf := drain(6*left, 5*left)
	t.Logf("deadlines leaving %v when the slot frees (late head): drained in %v, %d of %d failed", left, ld, lf, n)
	assert.Zero(t, lf, "waiters the limiter could have served in time run out of budget in its queue")
}
