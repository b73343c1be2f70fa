package limit_test

// From the review of the queue's order: a free slot went to the waiter with the
// most time left, always. Callers without a deadline, or with a far one,
// starved those with a near one (4 of 40 admitted), and a steady stream of
// new callers overtook those a burst had queued (52 of 55 against 55). The
// queue is first come first served again, but for a late oldest waiter.

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/limit"
	"github.com/stretchr/testify/assert"
)

// mixedLoad runs, for 2 s of fake time, `bg` background workers that call in
// a closed loop with context bgCtx (no deadline, or a far one), and one
// interactive call every 50 ms with a 200 ms deadline, all through l; every
// admitted call holds its slot 10 ms (a healthy dependency). It returns how
// many interactive calls there were and how many were admitted.
func mixedLoad(t *testing.T, l acquirer, bg int, bgCtx func() (context.Context, context.CancelFunc)) (calls, ok int64) {
	var okN, callsN atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range bg {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := bgCtx()
				tk, err := l.Acquire(ctx)
				if err == nil {
					time.Sleep(10 * time.Millisecond)
					l.Release(tk, nil)
				}
				cancel()
			}
		})
	}
	for range 40 {
		time.Sleep(50 * time.Millisecond)
		wg.Go(func() {
			callsN.Add(1)
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			tk, err := l.Acquire(ctx)
			if err == nil {
				okN.Add(1)
				time.Sleep(10 * time.Millisecond)
				l.Release(tk, nil)
			}
		})
	}
	close(stop)
	wg.Wait()
	return callsN.Load(), okN.Load()
}

// A bulkhead of 2 slots with a queue, shared by 4 background workers that
// send calls without a deadline (a batch job, a consumer loop) and by
// interactive calls with a 200 ms deadline. The dependency is healthy and
// answers in 10 ms: in first-come first-served order an interactive call
// waits at most for the 4 background calls queued ahead of it (2 rounds of
// 10 ms), and every one succeeds. With "no deadline first", a background
// worker is always waiting when a slot frees, so no interactive call ever
// gets one: every one fails with ErrLimited, for as long as the batch runs.
func TestReview20NoDeadlineWaitersDoNotStarveDeadlineCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := limit.NewFixed(2, limit.MaxWaiting(100))
		calls, ok := mixedLoad(t, l, 4, func() (context.Context, context.CancelFunc) {
			return context.WithCancel(context.Background())
		})
		t.Logf("interactive calls admitted: %d of %d", ok, calls)
		assert.GreaterOrEqual(t, ok, calls*9/10, "interactive calls with a 200 ms deadline starved by background calls without one (FIFO would admit all within ~20 ms)")
	})
}

// The same with background calls that do have a deadline, a far one (a
// batch job's 1 h timeout): the latest deadline goes first, so the
// interactive calls starve all the same.
func TestReview20FarDeadlineWaitersDoNotStarveNearDeadlineCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := limit.NewFixed(2, limit.MaxWaiting(100))
		calls, ok := mixedLoad(t, l, 4, func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), time.Hour)
		})
		t.Logf("interactive calls admitted: %d of %d", ok, calls)
		assert.GreaterOrEqual(t, ok, calls*9/10, "interactive calls starved by background calls with a far deadline")
	})
}

type acquirer interface {
	Acquire(context.Context) (limit.Ticket, error)
	Release(limit.Ticket, error)
}

// fifo is a reference bulkhead that serves its queue first come, first
// served: the order before the change.
type fifo struct {
	mu       sync.Mutex
	n, limit int
	queue    []chan struct{}
}

func (f *fifo) Acquire(ctx context.Context) (limit.Ticket, error) {
	f.mu.Lock()
	if f.n < f.limit && len(f.queue) == 0 {
		f.n++
		f.mu.Unlock()
		return 1, nil
	}
	ch := make(chan struct{})
	f.queue = append(f.queue, ch)
	f.mu.Unlock()
	select {
	case <-ch:
		return 1, nil
	case <-ctx.Done():
		f.mu.Lock()
		defer f.mu.Unlock()
		for i, q := range f.queue {
			if q == ch {
				f.queue = append(f.queue[:i], f.queue[i+1:]...)
				return 0, limit.ErrLimited
			}
		}
		f.n-- // granted meanwhile: pass it on
		f.grant()
		return 0, limit.ErrLimited
	}
}

func (f *fifo) Release(limit.Ticket, error) {
	f.mu.Lock()
	f.n--
	f.grant()
	f.mu.Unlock()
}

func (f *fifo) grant() {
	for f.n < f.limit && len(f.queue) > 0 {
		close(f.queue[0])
		f.queue = f.queue[1:]
		f.n++
	}
}

// The same load through a first-come first-served bulkhead: every
// interactive call is admitted. (Control for the two tests above.)
func TestReview20ControlFIFOAdmitsAll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		calls, ok := mixedLoad(t, &fifo{limit: 2}, 4, func() (context.Context, context.CancelFunc) {
			return context.WithCancel(context.Background())
		})
		t.Logf("FIFO: interactive calls admitted: %d of %d", ok, calls)
		assert.Equal(t, calls, ok)
	})
}

// steady runs a burst of 5 calls, then one call every 10 ms (1 ms after
// each slot frees), each with the same 100 ms timeout, through a limit of
// 1 whose calls take 10 ms (the dependency's capacity, exactly): it returns
// how many of the calls were admitted.
func steady(l acquirer) (calls, ok int64) {
	var okN, callsN atomic.Int64
	var wg sync.WaitGroup
	one := func() {
		callsN.Add(1)
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		tk, err := l.Acquire(ctx)
		if err == nil {
			okN.Add(1)
			time.Sleep(10 * time.Millisecond)
			l.Release(tk, nil)
		}
	}
	for range 5 {
		wg.Go(one)
	}
	time.Sleep(time.Millisecond)
	for range 50 {
		time.Sleep(10 * time.Millisecond)
		wg.Go(one)
	}
	wg.Wait()
	return callsN.Load(), okN.Load()
}

// Callers that all have the same time budget: a burst leaves a standing
// queue that a steady stream at the dependency's capacity keeps. First
// come first served, each waits 40 ms of its 100 ms and all succeed; with
// "latest deadline first" every newcomer overtakes the queue, and those
// queued by the burst all run out of time although they would have been
// served in time.
func TestReview20ASteadyStreamDoesNotStarveQueuedCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc, fok := steady(&fifo{limit: 1})
		t.Logf("FIFO: admitted %d of %d", fok, fc)
		calls, ok := steady(limit.NewFixed(1, limit.MaxWaiting(100)))
		t.Logf("limit: admitted %d of %d", ok, calls)
		assert.Equal(t, fok, ok, "calls that FIFO serves in time fail")
	})
}
