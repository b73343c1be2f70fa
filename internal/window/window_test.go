package window

import (
	"testing"
	"testing/synctest"
	"time"
)

// While events are frequent, Tick reads the clock once in up to 64 of
// them: the 64 events after a bucket of time went by see the new bucket.
func TestTickSeesANewBucketWithinMaxEveryEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := NewClock(10 * time.Second)
		var r Ring
		for range 100 { // frequent: thousands of events a bucket
			for range 1000 {
				c.Tick(&r)
			}
			time.Sleep(time.Millisecond)
		}
		if got := c.every.Load(); got != maxEvery {
			t.Fatalf("every = %d after frequent events; want %d", got, maxEvery)
		}
		start := c.Epoch()
		time.Sleep(c.Bucket())
		for range maxEvery {
			c.Tick(&r)
		}
		if got := c.Epoch(); got != start+1 {
			t.Errorf("after a bucket went by and %d events, the epoch is %d; want %d", maxEvery, got, start+1)
		}
	})
}
