package limit_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/resiliencekit/resiliencekit/limit"
)

// TestReview38NoSlotLostOrDoubleGranted has 64 goroutines take and give
// back the 8 slots of a queued bulkhead for a second, with tiny budgets
// (often ending just as a slot is granted), cancellations and stalls that
// make waiters late, and holds the Limiter to its accounting: never more
// than 8 hold a slot, at the end none is held and none waits, and it
// still admits 8 at once and not a 9th.
func TestReview38NoSlotLostOrDoubleGranted(t *testing.T) {
	l := limit.NewFixed(8, limit.MaxWaiting(1000), limit.OldestOnTime())
	var holders, most atomic.Int64
	var granted, refused atomic.Int64
	stop := time.Now().Add(time.Second)
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 38))
			for time.Now().Before(stop) {
				ctx, cancel := context.Background(), context.CancelFunc(func() {})
				switch r.IntN(4) {
				case 0:
					ctx, cancel = context.WithTimeout(ctx, time.Duration(r.IntN(300))*time.Microsecond)
				case 1:
					ctx, cancel = context.WithTimeout(ctx, time.Duration(r.IntN(20))*time.Millisecond)
				case 2:
					ctx, cancel = context.WithCancel(ctx)
					d := time.Duration(r.IntN(200)) * time.Microsecond
					go func() { time.Sleep(d); cancel() }()
				}
				tk, err := l.Acquire(ctx)
				if err != nil {
					require.ErrorIs(t, err, limit.ErrLimited)
					refused.Add(1)
					cancel()
					continue
				}
				granted.Add(1)
				h := holders.Add(1)
				for m := most.Load(); h > m && !most.CompareAndSwap(m, h); m = most.Load() {
				}
				if r.IntN(50) == 0 {
					time.Sleep(5 * time.Millisecond) // a stall: the answer time jumps
				} else {
					time.Sleep(time.Duration(r.IntN(100)) * time.Microsecond)
				}
				holders.Add(-1)
				l.Release(tk, errors.New("x"))
				cancel()
			}
		})
	}
	wg.Wait()
	t.Logf("granted %d, refused %d, most holding %d", granted.Load(), refused.Load(), most.Load())
	assert.LessOrEqual(t, most.Load(), int64(8))
	assert.Zero(t, l.InFlight())
	assert.Zero(t, l.Waiting())
	// And the bulkhead still admits 8 at once, and not a 9th.
	var tks []limit.Ticket
	for range 8 {
		tk, err := l.Acquire(context.Background())
		require.NoError(t, err)
		tks = append(tks, tk)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	_, err := l.Acquire(ctx)
	assert.ErrorIs(t, err, limit.ErrLimited)
	for _, tk := range tks {
		l.Release(tk, nil)
	}
}

// TestReview38AdaptiveWithEnterBalances holds an adaptive Limiter to the
// same accounting with attempts entering past its limit, as WaitWhenOpen's
// pacer does: at the end none is held, none waits, and the limit is at
// least 1.
func TestReview38AdaptiveWithEnterBalances(t *testing.T) {
	l := limit.NewAIMD(limit.MaxWaiting(1<<20), limit.Backoff(0.5), limit.Initial(4), limit.OldestOnTime())
	stop := time.Now().Add(time.Second)
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 39))
			for time.Now().Before(stop) {
				var tk limit.Ticket
				if r.IntN(3) == 0 {
					tk = l.Enter()
				} else {
					ctx, cancel := context.WithTimeout(context.Background(), time.Duration(r.IntN(5000))*time.Microsecond)
					var err error
					tk, err = l.Acquire(ctx)
					cancel()
					if err != nil {
						continue
					}
				}
				time.Sleep(time.Duration(r.IntN(200)) * time.Microsecond)
				var err error
				switch r.IntN(4) {
				case 0:
					err = context.DeadlineExceeded
				case 1:
					err = context.Canceled
				}
				l.Release(tk, err)
			}
		})
	}
	wg.Wait()
	assert.Zero(t, l.InFlight())
	assert.Zero(t, l.Waiting())
	assert.GreaterOrEqual(t, l.Limit(), 1)
}

// TestReview38FastPathAllocatesNothing holds Acquire and Release, with no
// queue, to admitting at once and allocating nothing, also once a queue
// with a late waiter has come and gone.
func TestReview38FastPathAllocatesNothing(t *testing.T) {
	l := limit.NewFixed(2, limit.MaxWaiting(10), limit.OldestOnTime())
	// A queue with a late waiter comes and goes.
	a, _ := l.Acquire(context.Background())
	b, _ := l.Acquire(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if tk, err := l.Acquire(ctx); err == nil {
			l.Release(tk, nil)
		}
	}()
	for l.Waiting() == 0 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(19 * time.Millisecond)
	l.Release(a, nil)
	<-done
	cancel()
	l.Release(b, nil)
	require.Zero(t, l.Waiting())
	require.Zero(t, l.InFlight())
	ctx = context.Background()
	allocs := testing.AllocsPerRun(1000, func() {
		tk, err := l.Acquire(ctx)
		if err != nil {
			panic(err)
		}
		l.Release(tk, nil)
	})
	assert.Zero(t, allocs)
}
