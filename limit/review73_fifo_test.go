package limit_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/limit"
)

// Waiters on time are served first come first served, a canceled one
// leaves, and a done context never jumps the queue; no slot is lost.
func TestReview73QueueFIFOAndCancel(t *testing.T) {
	for _, oot := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			opts := []limit.Option{limit.MaxWaiting(100)}
			if oot {
				opts = append(opts, limit.OldestOnTime())
			}
			l := limit.NewFixed(1, opts...)
			tk, _ := l.Acquire(context.Background())
			var mu sync.Mutex
			var order []int
			var wg sync.WaitGroup
			for i := range 50 {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				if i%7 == 3 {
					go func() { time.Sleep(100 * time.Millisecond); cancel() }()
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer cancel()
					tk, err := l.Acquire(ctx)
					if err != nil {
						if i%7 != 3 {
							t.Errorf("waiter %d refused: %v", i, err)
						}
						return
					}
					mu.Lock()
					order = append(order, i)
					mu.Unlock()
					time.Sleep(10 * time.Millisecond)
					l.Release(tk, nil)
				}()
				time.Sleep(time.Millisecond)
				synctest.Wait()
			}
			done, c := context.WithCancel(context.Background())
			c()
			if _, err := l.Acquire(done); err == nil {
				t.Errorf("a done context jumped the queue")
			}
			l.Release(tk, nil)
			wg.Wait()
			for j := 1; j < len(order); j++ {
				if order[j] < order[j-1] {
					t.Errorf("oldestOnTime %v: not FIFO: %v", oot, order)
					break
				}
			}
			if l.InFlight() != 0 || l.Waiting() != 0 {
				t.Errorf("slots lost: %d in flight, %d waiting", l.InFlight(), l.Waiting())
			}
		})
	}
}
