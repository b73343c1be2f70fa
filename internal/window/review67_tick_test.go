package window

import (
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// Rare events: each Tick counts its event in the bucket of its own time.
func TestReview67RareTickCurrentBucket(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := NewClock(10 * time.Second)
		var r Ring
		start := time.Now()
		for i := range 100 {
			e := c.Tick(&r)
			want := int64(time.Since(start) / time.Second)
			if e != want {
				t.Fatalf("event %d at %v counted in bucket %d, want %d", i, time.Since(start), e, want)
			}
			time.Sleep(time.Duration(700+i*37%900) * time.Millisecond)
		}
	})
}

// After a busy period, then a lull, how many events are counted in a stale bucket
// (docs: up to maxEvery-1), sequentially and concurrently.
func TestReview67LullStaleCount(t *testing.T) {
	for _, conc := range []int{1, 256} {
		c := NewClock(10 * time.Second)
		var r Ring
		// busy: ~2000 events/ms for 1.2 s
		stop := time.Now().Add(1200 * time.Millisecond)
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(stop) {
					c.Tick(&r)
				}
			}()
		}
		wg.Wait()
		t.Logf("every after busy: %d", c.every.Load())
		time.Sleep(2100 * time.Millisecond)
		var stale atomic.Int64
		cur := int64(time.Since(c.start)) / c.bucket
		gate := make(chan struct{})
		for range conc {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-gate
				for range 256 / conc * 1 {
					if e := c.Tick(&r); e < cur {
						stale.Add(1)
					}
				}
			}()
		}
		close(gate)
		wg.Wait()
		t.Logf("conc %d: %d of 256 events after a lull counted in a stale bucket", conc, stale.Load())
		if conc == 1 && stale.Load() > maxEvery { // concurrent events that read the epoch as it moves on may add their number
			t.Errorf("conc %d: %d stale events, docs say up to %d", conc, stale.Load(), maxEvery)
		}
	}
}
