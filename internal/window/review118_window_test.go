package window

import (
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// After frequent events, a lull of an hour, then a burst: at most maxEvery
// events go to the stale bucket (documented), the rest are in the window.
func TestReview118LullThenBurst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := NewClock(10 * time.Second)
		var r Ring
		for range 100 { // frequent: 10000 events a second
			for range 100 {
				c.Tick(&r)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if c.every.Load() <= 1 {
			t.Fatalf("every = %d after frequent events", c.every.Load())
		}
		time.Sleep(time.Hour)
		const burst = 500
		for range burst {
			c.Tick(&r)
		}
		got := r.Sum(c.Now(&r))
		if got < burst-maxEvery {
			t.Fatalf("after a lull, a burst of %d counts %d in the window: more than %d lost", burst, got, maxEvery)
		}
	})
}

// Concurrent AddIf never passes the cap; concurrent Add loses nothing.
func TestReview118ConcurrentAddIf(t *testing.T) {
	var r Ring
	var ok atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 10000 {
				if r.AddIf(7, func(before uint64) bool { return before < 1000 }) {
					ok.Add(1)
				}
				r.Add(8)
			}
		})
	}
	wg.Wait()
	if ok.Load() != 1000 || r.At(7) != 1000 {
		t.Fatalf("AddIf admitted %d, bucket %d, want 1000", ok.Load(), r.At(7))
	}
	if r.At(8) != 80000 || r.Sum(8) != 81000 {
		t.Fatalf("Add counted %d, sum %d", r.At(8), r.Sum(8))
	}
}

// Bucket edges: an event in bucket e-Buckets+1 is in the window ending at
// e, one in e-Buckets is not; a caller that read e long ago counts nothing
// over a newer bucket's count.
func TestReview118Edges(t *testing.T) {
	var r Ring
	r.Add(100)
	r.Add(109)
	if r.Sum(109) != 2 || r.Sum(110) != 1 || r.Sum(118) != 1 || r.Sum(119) != 0 {
		t.Fatalf("edges: %d %d %d %d", r.Sum(109), r.Sum(110), r.Sum(118), r.Sum(119))
	}
	r.Add(120) // slot 0 now counts 120
	if n := r.Add(110); n != 0 {
		t.Fatalf("a stale Add(110) over bucket 120 counted: %d", n)
	}
	if r.At(120) != 1 {
		t.Fatalf("bucket 120 = %d", r.At(120))
	}
	if r.Remove(110) || !r.Remove(120) || r.At(120) != 0 {
		t.Fatalf("remove")
	}
}
