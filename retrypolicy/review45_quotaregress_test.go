package retrypolicy

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A retry counted in a slot with an older bucket than the one the slot
// already holds resets the newer bucket's count (Ring.AddIf with an epoch
// a window or more stale). Watch the ring for a slot whose bucket goes
// backwards while goroutines hammer Take.
func TestReview45QuotaSlotGoesBackwards(t *testing.T) {
	q := NewQuota(0, 1000, 10*time.Millisecond) // 1 ms buckets
	var back atomic.Int64
	var lost atomic.Int64
	stop := time.Now().Add(3 * time.Second)
	var wg sync.WaitGroup
	wg.Go(func() {
		var last [10]uint64
		for time.Now().Before(stop) {
			for i := range q.retries {
				w := q.retries[i].Load()
				if tag, prev := w>>32, last[i]>>32; last[i] != 0 && tag < prev {
					back.Add(1)
					lost.Add(int64(last[i] & (1<<32 - 1)))
				}
				last[i] = w
			}
		}
	})
	// Goroutines that spin without yielding: each is preempted (async, every
	// 10 ms) at any instruction, often inside Take, and waits for the others'
	// time slices before it goes on: far more than a window.
	for range 40 {
		wg.Go(func() {
			for time.Now().Before(stop) {
				q.Take()
			}
		})
	}
	runtime.Gosched()
	wg.Wait()
	if back.Load() > 0 {
		t.Errorf("a slot's bucket went backwards %d times (a stale retry reset a newer bucket, forgetting %d retries)", back.Load(), lost.Load())
	}
}
