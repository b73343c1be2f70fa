package limit_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/stretchr/testify/assert"
)

// What the former order took, on an idle 2-core machine, in
// TestReview39ManyWaitersLeave: 30,000 waiters whose deadlines pass
// together all left 645 to 667 ms after the first could (four runs), and
// the mixed run took 1.03 to 1.06 s. The bounds are 8 times that plus
// 200 ms, for a loaded machine.
const (
	r39LeaveBound = 8*667*time.Millisecond + 200*time.Millisecond  // former 667 ms
	r39MixedBound = 8*1057*time.Millisecond + 200*time.Millisecond // former 1,057 ms
)

// Tens of thousands of waiters whose deadlines pass together, in real
// time, leave in about the time they did in the former order, in either
// order; and so do they with the slot freed every millisecond while they
// wait and leave.
func TestReview39ManyWaitersLeave(t *testing.T) {
	if zzRace {
		t.Skip("30,000 goroutines: the race detector took 6 to 9.5 s and 4.6 GB, past the bound")
	}
	const n = 30000
	for _, o := range []struct {
		name string
		opts []limit.Option
	}{
		{"default", nil},
		{"OldestOnTime", []limit.Option{limit.OldestOnTime()}},
	} {
		mk := func(slots int) *limit.Limiter {
			return limit.NewFixed(slots, append([]limit.Option{limit.MaxWaiting(n)}, o.opts...)...)
		}
		l := mk(1)
		tk, _ := l.Acquire(context.Background())
		var wg sync.WaitGroup
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if tk, err := l.Acquire(ctx); err == nil {
					l.Release(tk, nil)
				}
			}()
		}
		start := time.Now()
		wg.Wait()
		took := time.Since(start)
		cancel()
		t.Logf("%s: all %d left %v after the first could (former: 645 to 667 ms)", o.name, n, took)
		assert.Less(t, took, r39LeaveBound, o.name)
		l.Release(tk, nil)
		assert.Zero(t, l.InFlight(), o.name)
		assert.Zero(t, l.Waiting(), o.name)

		// the slot freed every ms while they wait: grants scan the queue
		l = mk(4)
		ctx, cancel = context.WithTimeout(context.Background(), time.Second)
		start = time.Now()
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c := ctx
				if i%2 == 0 {
					var cc context.CancelFunc
					c, cc = context.WithTimeout(ctx, time.Duration(i%7+1)*50*time.Millisecond)
					defer cc()
				}
				if tk, err := l.Acquire(c); err == nil {
					time.Sleep(time.Millisecond)
					l.Release(tk, nil)
				}
			}()
		}
		wg.Wait()
		took = time.Since(start)
		cancel()
		t.Logf("%s: mixed, %v (former: 1.03 to 1.06 s)", o.name, took)
		assert.Less(t, took, r39MixedBound, o.name)
		assert.Zero(t, l.InFlight(), o.name)
		assert.Zero(t, l.Waiting(), o.name)
	}
}
