package window

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
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

// A caller that read its bucket a window or more ago (stalled, on a
// loaded machine) counts nothing with AddIf, and leaves the newer bucket
// in its slot as it was; a slot whose bucket is older by a window or more
// (or wrapped around) is reset.
func TestAddIfNeverMovesASlotBack(t *testing.T) {
	yes := func(uint64) bool { return true }
	tests := []struct {
		name        string
		slot, e     int64 // the bucket the slot counts, the caller's
		ok          bool
		at          int64 // the bucket to read
		count, left uint64
	}{
		{name: "a window behind", slot: 20, e: 10, ok: false, at: 20, count: 2},
		{name: "far behind", slot: 500_008, e: 8, ok: false, at: 500_008, count: 2},
		{name: "same bucket", slot: 30, e: 30, ok: true, at: 30, count: 3},
		{name: "an older slot", slot: 30, e: 40, ok: true, at: 40, count: 1},
		{name: "wrapped around", slot: 10, e: 10 + 1<<32 - 1<<21 + 6, ok: true, at: 10 + 1<<32 - 1<<21 + 6, count: 1}, // its tag seems 2^21 ahead
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r Ring
			r.Add(tt.slot)
			r.Add(tt.slot)
			if got := r.AddIf(tt.e, yes); got != tt.ok {
				t.Errorf("AddIf(%d) on a slot of bucket %d = %v, want %v", tt.e, tt.slot, got, tt.ok)
			}
			if got := r.At(tt.at); got != tt.count {
				t.Errorf("bucket %d counts %d, want %d", tt.at, got, tt.count)
			}
		})
	}
}

// TestTickCountsARareEventInItsOwnBucket: while events are rare, Tick
// reads the clock before it counts one, so that an event after a lull is
// counted now, not in the bucket of the reading before the lull, which
// may be out of the window (a quota's call that then funded nothing).
func TestTickCountsARareEventInItsOwnBucket(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := NewClock(time.Second)
		var r Ring
		for i, gap := range []time.Duration{0, 2 * time.Second, 550 * time.Millisecond, 150 * time.Millisecond} {
			time.Sleep(gap)
			e := c.Tick(&r)
			now := c.Now(&r)
			assert.Equal(t, now, e, "event %d counted in the bucket of now", i)
			assert.EqualValues(t, 1, r.At(now), "event %d", i)
		}
	})
}
