// Package window counts events over a sliding window of time without a
// lock: a [Ring] of atomic slots, one per bucket of time, each packing the
// bucket it counts (mod 2^32) with its count, so that a stale slot is reset
// and counted in one compare-and-swap. A [Clock] tells the current bucket,
// reading the real clock only once in up to 64 events while events are
// frequent, and at every event while they are rare.
package window

import (
	"math"
	"sync/atomic"
	"time"
)

// Buckets is the number of buckets of a window.
const Buckets = 10

const (
	tagBits   = 32 // a slot's bucket, mod 2^32: a ring idle for 2^32 buckets, to within a window (50 days of 1 ms buckets), counts its old slots again
	countBits = 64 - tagBits
	countMask = 1<<countBits - 1
	tagMask   = 1<<tagBits - 1
	maxEvery  = 64      // most events between clock reads of Tick
	staleSpan = 1 << 20 // buckets: a slot this much ahead of a caller's bucket, or less, is newer than it, not wrapped around
)

// Ring counts events per bucket of time, over the last [Buckets] buckets.
// The zero Ring is empty.
type Ring [Buckets]atomic.Uint64

// Clock tells the bucket of time a window is in. Make one with [NewClock].
type Clock struct {
	bucket int64 // nanoseconds of time per bucket
	start  time.Time
	epoch  atomic.Int64 // the latest bucket of time seen since start
	every  atomic.Int64 // events between clock reads of Tick: 1 to maxEvery
}

// NewClock returns a Clock for a window of length w (at least one
// nanosecond per bucket).
func NewClock(w time.Duration) *Clock {
	c := &Clock{bucket: max(int64(w/Buckets), 1), start: time.Now()}
	c.every.Store(1)
	return c
}

// Bucket returns the length of a bucket.
func (c *Clock) Bucket() time.Duration { return time.Duration(c.bucket) }

// age returns how many buckets of time slot word w is behind epoch e. A
// slot a little ahead (another goroutine read a later clock) is of age 0;
// one that seems far ahead is a slot so old its tag wrapped around, and
// counts as older than the window.
func age(w uint64, e int64) int64 {
	d := int64(int32(uint32(uint64(e) - w>>countBits))) // signed distance, mod 2^32
	switch {
	case d >= 0:
		return d
	case d > -Buckets:
		return 0
	default:
		return math.MaxInt64
	}
}

// bump returns w counting one more in bucket e: reset if w counts an
// older bucket.
func bump(w uint64, e int64) uint64 {
	if age(w, e) > 0 {
		return uint64(e)&tagMask<<countBits | 1
	}
	return w + 1
}

// stale reports whether slot word w counts a bucket a window or more
// after e: a caller read e, then waited that long, and counting e there
// would wipe out the newer bucket's count.
func stale(w uint64, e int64) bool {
	d := int64(int32(uint32(uint64(e) - w>>countBits)))
	return d <= -Buckets && d > -staleSpan
}

// Add counts one in bucket e and returns the bucket's count; it counts
// nothing, and returns 0, if e's slot already counts a bucket a window or
// more after e.
func (r *Ring) Add(e int64) uint64 {
	slot := &r[e%Buckets]
	for {
		old := slot.Load()
		if stale(old, e) {
			return 0
		}
		if w := bump(old, e); slot.CompareAndSwap(old, w) {
			return w & countMask
		}
	}
}

// AddIf counts one in bucket e if ok, given the bucket's count before it,
// returns true; it returns false, counting nothing, when ok says no, or
// when e's slot already counts a bucket a window or more after e (a
// caller that read e, then waited that long). ok is asked again if
// another goroutine changed the bucket meanwhile, so that concurrent
// callers never count past what ok allows.
func (r *Ring) AddIf(e int64, ok func(before uint64) bool) bool {
	slot := &r[e%Buckets]
	for {
		old := slot.Load()
		if stale(old, e) {
			return false
		}
		var before uint64
		if age(old, e) == 0 {
			before = old & countMask
		}
		if !ok(before) {
			return false
		}
		if slot.CompareAndSwap(old, bump(old, e)) {
			return true
		}
	}
}

// Remove takes back one event counted in bucket e, if the ring still
// counts that bucket and an event in it, and reports whether it did: an
// event of a bucket that has left the window is gone already.
func (r *Ring) Remove(e int64) bool {
	slot := &r[e%Buckets]
	for {
		old := slot.Load()
		if age(old, e) != 0 || old>>countBits != uint64(e)&tagMask || old&countMask == 0 {
			return false
		}
		if slot.CompareAndSwap(old, old-1) {
			return true
		}
	}
}

// At returns the count of bucket e.
func (r *Ring) At(e int64) uint64 {
	if w := r[e%Buckets].Load(); age(w, e) == 0 {
		return w & countMask
	}
	return 0
}

// Sum returns the counts of the window ending with bucket e.
func (r *Ring) Sum(e int64) uint64 {
	var n uint64
	for i := range r {
		w := r[i].Load()
		if age(w, e) < Buckets {
			n += w & countMask
		}
	}
	return n
}

// Epoch returns the latest bucket seen, without reading the clock.
func (c *Clock) Epoch() int64 { return c.epoch.Load() }

// Tick counts one event in r, the ring of the events that set how often
// the clock is read, and reads the clock when it is due: before it counts
// the event while events are rare (the bucket of the last reading may be
// long over), after while they are frequent. It returns the bucket it
// counted the event in. After a lull that follows frequent events, up to
// [maxEvery] events (the one that makes the reading due among them, and
// those counted at once by other goroutines as it is taken) may be
// counted in the bucket of the last reading, until a reading (this one's
// or another's, such as [Clock.Now]) finds the buckets that went by.
func (c *Clock) Tick(r *Ring) int64 {
	if c.every.Load() == 1 {
		e := c.Now(r)
		r.Add(e)
		return e
	}
	e := c.epoch.Load()
	if r.Add(e)%uint64(c.every.Load()) == 0 {
		c.Now(r)
	}
	return e
}

// Now reads the clock and returns the current bucket. It also sets how
// often Tick reads the clock from the rate of the events in r: often
// enough that the events counted in a bucket already over (those between a
// bucket's start and the first read in it) are at most a sixteenth of a
// bucket's, and at every event when they are rare.
func (c *Clock) Now(r *Ring) int64 {
	elapsed := int64(time.Since(c.start))
	e := elapsed / c.bucket
	for {
		seen := c.epoch.Load()
		if e > seen && !c.epoch.CompareAndSwap(seen, e) {
			continue
		}
		if e < seen {
			return seen
		}
		// Events a bucket: the last bucket's, or this one's so far, scaled.
		var perBucket uint64
		if w := r[(e+Buckets-1)%Buckets].Load(); age(w, e) == 1 {
			perBucket = w & countMask
		}
		if w := r[e%Buckets].Load(); age(w, e) == 0 {
			// Enough events over enough of the bucket to scale up to it.
			if n, into := w&countMask, elapsed%c.bucket; n >= 16 && into >= min(c.bucket/4, int64(time.Millisecond)) {
				perBucket = max(perBucket, uint64(float64(n)*float64(c.bucket)/float64(into)))
			}
		}
		if e > seen+1 {
			perBucket = 0 // a bucket went by unseen: events are rare now
		}
		c.every.Store(int64(min(max(perBucket/16, 1), maxEvery)))
		return e
	}
}
