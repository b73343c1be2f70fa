package limit

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
)

// Many goroutines in real time, with deadlines from 0 to a few ms, some
// cancelled at random, through a fixed limit: never more than the limit
// hold a slot, and at the end none is held and none waits.
func TestReview39NoSlotLostOrDoubled(t *testing.T) {
	for _, n := range []int{1, 3} {
		l := NewFixed(n, MaxWaiting(1000), OldestOnTime())
		var holding, worst atomic.Int64
		var ok, refused atomic.Int64
		var wg sync.WaitGroup
		for g := range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(g), 7))
				for range 300 {
					var ctx context.Context
					var cancel context.CancelFunc
					switch rng.IntN(4) {
					case 0:
						ctx, cancel = context.WithCancel(context.Background())
						d := time.Duration(rng.IntN(300)) * time.Microsecond
						time.AfterFunc(d, cancel)
					case 1:
						ctx, cancel = context.WithCancel(context.Background())
					default:
						ctx, cancel = context.WithTimeout(context.Background(), time.Duration(rng.IntN(3000))*time.Microsecond)
					}
					tk, err := l.Acquire(ctx)
					if err != nil {
						refused.Add(1)
						assert.ErrorIs(t, err, ErrLimited)
						cancel()
						continue
					}
					assert.NotZero(t, tk&slot)
					h := holding.Add(1)
					for {
						w := worst.Load()
						if h <= w || worst.CompareAndSwap(w, h) {
							break
						}
					}
					if rng.IntN(3) == 0 {
						time.Sleep(time.Duration(rng.IntN(200)) * time.Microsecond)
					}
					holding.Add(-1)
					var rerr error
					if rng.IntN(5) == 0 {
						rerr = errors.New("boom")
					}
					l.Release(tk, rerr)
					ok.Add(1)
					cancel()
				}
			}()
		}
		wg.Wait()
		t.Logf("n=%d ok %d refused %d worst %d", n, ok.Load(), refused.Load(), worst.Load())
		assert.LessOrEqual(t, worst.Load(), int64(n))
		assert.Equal(t, 0, l.InFlight())
		assert.Equal(t, 0, l.Waiting())
		// the fast path is open again
		tk, err := l.Acquire(context.Background())
		require.NoError(t, err)
		l.Release(tk, nil)
	}
}

// The fast path allocates nothing.
func TestReview39FastPathAllocs(t *testing.T) {
	l := NewFixed(4, MaxWaiting(10), OldestOnTime())
	ctx := context.Background()
	a := testing.AllocsPerRun(1000, func() {
		tk, _ := l.Acquire(ctx)
		l.Release(tk, nil)
	})
	assert.Zero(t, a)
	la := NewAIMD(MaxWaiting(10))
	a = testing.AllocsPerRun(1000, func() {
		tk, _ := la.Acquire(ctx)
		la.Release(tk, errors.ErrUnsupported)
		tk = la.Enter()
		la.Release(tk, nil)
	})
	assert.Zero(t, a)
}
