package limit_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/limit"
)

var errReview117Dep = errors.New("503")

// After a decrease the adaptive limit is fractional (20*0.9 = 18, then
// 16.2): Limit() reports it truncated (16), while Acquire admits while
// fewer than 16.2 are in flight, that is 17. InFlight() > Limit() with no
// Enter.
func TestReview117InFlightNeverAboveLimit(t *testing.T) {
	l := limit.NewAIMD(limit.Initial(20))
	// two decreases, each in a new round: 20 -> 18 -> 16.2
	for range 2 {
		tk, err := l.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		l.Release(tk, errReview117Dep)
	}
	var tks []limit.Ticket
	for {
		tk, err := l.Acquire(context.Background())
		if err != nil {
			break
		}
		tks = append(tks, tk)
	}
	if in, lim := l.InFlight(), l.Limit(); in > lim {
		t.Errorf("InFlight() = %d above Limit() = %d: admitted while fewer than the limit are in flight is not what Limit() says", in, lim)
	}
	for _, tk := range tks {
		l.Release(tk, context.Canceled)
	}
}

// Many goroutines, random cancellations while queued, random outcomes:
// never more than the limit in flight, and once all are done nothing is
// held or waiting. Fixed limit.
func TestReview117StressFixedQueue(t *testing.T) {
	const n = 3
	l := limit.NewFixed(n, limit.MaxWaiting(50))
	var inOp, maxIn atomic.Int64
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for range 300 {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rng.IntN(300))*time.Microsecond)
				tk, err := l.Acquire(ctx)
				if err == nil {
					v := inOp.Add(1)
					for {
						m := maxIn.Load()
						if v <= m || maxIn.CompareAndSwap(m, v) {
							break
						}
					}
					if rng.IntN(4) == 0 {
						time.Sleep(time.Duration(rng.IntN(50)) * time.Microsecond)
					}
					inOp.Add(-1)
					var e error
					if rng.IntN(3) == 0 {
						e = errReview117Dep
					}
					l.Release(tk, e)
				} else if !errors.Is(err, limit.ErrLimited) {
					t.Errorf("Acquire: %v", err)
				}
				cancel()
			}
		}()
	}
	wg.Wait()
	if m := maxIn.Load(); m > n {
		t.Errorf("%d in flight at once, limit %d", m, n)
	}
	if l.InFlight() != 0 || l.Waiting() != 0 {
		t.Errorf("after all: InFlight %d Waiting %d, want 0 0", l.InFlight(), l.Waiting())
	}
}

// A queued waiter whose context ends leaves; the next free slot goes to
// the next waiter in order (FIFO while none is late), and no slot is lost.
func TestReview117QueuedLeaveKeepsOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := limit.NewFixed(1, limit.MaxWaiting(10))
		tk0, _ := l.Acquire(context.Background())
		var order []int
		var mu sync.Mutex
		ctxs := make([]context.CancelFunc, 5)
		for i := range 5 {
			ctx, cancel := context.WithCancel(context.Background())
			ctxs[i] = cancel
			go func() {
				tk, err := l.Acquire(ctx)
				if err != nil {
					return
				}
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
				time.Sleep(time.Millisecond)
				l.Release(tk, nil)
			}()
			synctest.Wait()
		}
		ctxs[1]()
		ctxs[3]()
		synctest.Wait()
		if w := l.Waiting(); w != 3 {
			t.Errorf("Waiting %d, want 3", w)
		}
		l.Release(tk0, nil)
		time.Sleep(time.Second)
		synctest.Wait()
		if len(order) != 3 || order[0] != 0 || order[1] != 2 || order[2] != 4 {
			t.Errorf("served %v, want [0 2 4]", order)
		}
		if l.InFlight() != 0 || l.Waiting() != 0 {
			t.Errorf("InFlight %d Waiting %d", l.InFlight(), l.Waiting())
		}
		for _, c := range ctxs {
			c()
		}
	})
}

// The adaptive limit learns nothing from cancellations, and after an
// outage that took it to Min it comes back: a healthy dependency at a
// steady concurrency of 40 is served in full again within a few round trips.
func TestReview117AIMDRecoversAfterOutage(t *testing.T) {
	l := limit.NewAIMD(limit.Initial(50), limit.Max(200))
	// outage: many rounds of failures
	for range 100 {
		tk, err := l.Acquire(context.Background())
		if err != nil {
			continue
		}
		l.Release(tk, errReview117Dep)
	}
	if l.Limit() != 1 {
		t.Fatalf("after outage limit %d, want 1", l.Limit())
	}
	// cancellations teach nothing
	for range 100 {
		tk, _ := l.Acquire(context.Background())
		l.Release(tk, context.Canceled)
	}
	if l.Limit() != 1 {
		t.Errorf("cancellations moved the limit to %d", l.Limit())
	}
	// healthy: 40 callers at once, each round trip all release with success
	rounds := 0
	for ; rounds < 30; rounds++ {
		var tks []limit.Ticket
		for range 40 {
			if tk, err := l.Acquire(context.Background()); err == nil {
				tks = append(tks, tk)
			}
		}
		if len(tks) == 40 {
			break
		}
		for _, tk := range tks {
			l.Release(tk, nil)
		}
	}
	t.Logf("rounds to serve 40: %d, limit %d", rounds, l.Limit())
	if rounds >= 30 {
		t.Errorf("the limit did not come back: %d after 30 round trips", l.Limit())
	}
}
