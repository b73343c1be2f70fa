package window

import (
	"testing"
	"testing/synctest"
	"time"
)

// Add with a bucket read a window ago (a goroutine that stalled between
// reading the epoch and counting) wipes out the current bucket's count:
// AddIf guards against this, Add does not.
func TestReview90AddStaleWipes(t *testing.T) {
	var r Ring
	for i := 0; i < 100; i++ {
		r.Add(25)
	}
	r.Add(15) // read 10 buckets ago
	if got := r.At(25); got != 100 {
		t.Errorf("bucket 25 holds %d after a stale Add of bucket 15, want 100", got)
	}
	if s := r.Sum(25); s < 100 {
		t.Errorf("window sum %d after a stale Add, want >= 100", s)
	}
}

// Long idle gaps and many buckets: Sum never counts buckets out of the window.
func TestReview90ClockIdle(t *testing.T) {
	r90idle(t, []time.Duration{time.Second + time.Millisecond, time.Hour, 500 * 24 * time.Hour})
}

func r90idle(t *testing.T, gaps []time.Duration) {
	synctest.Test(t, func(t *testing.T) {
		c := NewClock(time.Second)
		var r Ring
		for i := 0; i < 1000; i++ {
			c.Tick(&r)
		}
		for _, gap := range gaps {
			time.Sleep(gap)
			e := c.Now(&r)
			if s := r.Sum(e); s != 0 {
				t.Errorf("after idle %v: sum %d", gap, s)
			}
			for i := 0; i < 1000; i++ {
				c.Tick(&r)
			}
			time.Sleep(gap)
			// one event after the gap: counted in the new bucket
			c.Tick(&r) // documented: may be counted in the bucket of the last reading
			if s := r.Sum(c.Now(&r)); s > maxEvery {
				t.Errorf("after idle %v with frequent events before: sum %d", gap, s)
			}
		}
	})
}
