package retrypolicy

import (
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"
)

// ErrQuotaExhausted is the reason a call stopped retrying because its
// [Quota] had no retry left.
var ErrQuotaExhausted = errors.New("retry quota exhausted")

// Quota caps the retries of all calls to one dependency at a share of
// those calls, so that in an outage retries add a bounded load rather than
// multiplying it (what Google's SRE book and Finagle call a retry budget;
// here "budget" is only ever the time a call may take). Over a sliding
// window, retries may number at most ratio times the calls plus a floor of
// floorPerSecond per second of the window, which lets a service with little
// traffic still retry. A call that finds the quota spent gives up with its
// last error and [ErrQuotaExhausted].
//
// One Quota is shared by every [Policy] calling the same dependency. It is
// safe for concurrent use and takes no lock: a call adds to an atomic
// counter, and reads the clock only once in up to 64 calls while calls are
// frequent (every call while they are rare); a retry reads it every time. The zero Quota sets no limit; make one with [NewQuota].
type Quota struct {
	limited bool
	ratio   float64
	floor   float64
	bucket  int64 // nanoseconds of time per bucket
	start   time.Time

	epoch atomic.Int64 // the latest bucket of time seen since start
	every atomic.Int64 // calls between clock reads of deposit: 1 to maxEvery
	// Rings of counters, one slot per bucket of time: a slot packs the
	// bucket it counts (its epoch, mod 2^tagBits) with the count, so that
	// a stale slot is reset and counted in one compare-and-swap.
	calls, retries [quotaBuckets]atomic.Uint64
}

const (
	quotaBuckets = 10
	tagBits      = 32 // a slot's bucket, mod 2^32: years of buckets before it wraps
	countBits    = 64 - tagBits
	countMask    = 1<<countBits - 1
	tagMask      = 1<<tagBits - 1
	maxEvery     = 64 // most calls between clock reads of deposit
)

// NewQuota returns a Quota allowing retries of up to ratio (for example
// 0.1) of the calls plus floorPerSecond retries per second, over a sliding
// window of window (10 s if window is 0), kept in 10 buckets. It panics if
// ratio or floorPerSecond is negative, infinite or NaN, or window is
// negative or under 10 ms.
func NewQuota(ratio float64, floorPerSecond float64, window time.Duration) *Quota {
	if !finite(ratio) || ratio < 0 {
		panic(fmt.Sprintf("retrypolicy: NewQuota ratio %v is not a finite number >= 0", ratio))
	}
	if !finite(floorPerSecond) || floorPerSecond < 0 {
		panic(fmt.Sprintf("retrypolicy: NewQuota floorPerSecond %v is not a finite number >= 0", floorPerSecond))
	}
	if window < 0 || (window > 0 && window < 10*time.Millisecond) {
		panic(fmt.Sprintf("retrypolicy: NewQuota window %v is negative or under 10ms", window))
	}
	if window == 0 {
		window = 10 * time.Second
	}
	q := &Quota{
		limited: true,
		ratio:   ratio,
		floor:   floorPerSecond * window.Seconds(),
		bucket:  max(int64(window/quotaBuckets), 1),
		start:   time.Now(),
	}
	q.every.Store(1)
	return q
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

// age returns how many buckets of time slot word w is behind epoch e. A
// slot a little ahead (another goroutine read a later clock) is of age 0;
// one that seems far ahead is a slot so old its tag wrapped around, and
// counts as older than the window.
func age(w uint64, e int64) int64 {
	d := int64(int32(uint32(uint64(e) - w>>countBits))) // signed distance, mod 2^32
	switch {
	case d >= 0:
		return d
	case d > -quotaBuckets:
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

// add counts one in the slot of e in ring and returns the slot's count.
func add(ring *[quotaBuckets]atomic.Uint64, e int64) uint64 {
	slot := &ring[e%quotaBuckets]
	for {
		old := slot.Load()
		if w := bump(old, e); slot.CompareAndSwap(old, w) {
			return w & countMask
		}
	}
}

// now reads the clock and returns the current bucket of time. It also
// sets how often deposit reads the clock: often enough that the calls
// counted in a bucket already over (those between a bucket's start and the
// first read in it) are at most a sixteenth of a bucket's calls, and every
// call when calls are rare.
func (q *Quota) now() int64 {
	elapsed := int64(time.Since(q.start))
	e := elapsed / q.bucket
	for {
		seen := q.epoch.Load()
		if e > seen && !q.epoch.CompareAndSwap(seen, e) {
			continue
		}
		if e < seen {
			return seen
		}
		// Calls a bucket: the last bucket's, or this one's so far, scaled.
		var perBucket uint64
		if w := q.calls[(e+quotaBuckets-1)%quotaBuckets].Load(); age(w, e) == 1 {
			perBucket = w & countMask
		}
		if w := q.calls[e%quotaBuckets].Load(); age(w, e) == 0 {
			// Enough calls over enough of the bucket to scale up to it.
			if n, into := w&countMask, elapsed%q.bucket; n >= 16 && into >= min(q.bucket/4, int64(time.Millisecond)) {
				perBucket = max(perBucket, uint64(float64(n)*float64(q.bucket)/float64(into)))
			}
		}
		if e > seen+1 {
			perBucket = 0 // a bucket went by unseen: calls are rare now
		}
		q.every.Store(int64(min(max(perBucket/16, 1), maxEvery)))
		return e
	}
}

// sum returns the counts of ring's slots within the window ending at e.
func sum(ring *[quotaBuckets]atomic.Uint64, e int64) uint64 {
	var n uint64
	for i := range ring {
		w := ring[i].Load()
		if age(w, e) < quotaBuckets {
			n += w & countMask
		}
	}
	return n
}

// available returns how many retries the window ending at e allows.
func (q *Quota) available(e int64) float64 {
	return math.Floor(q.ratio*float64(sum(&q.calls, e))+q.floor) - float64(sum(&q.retries, e))
}

// deposit records a call.
func (q *Quota) deposit() {
	if !q.limited {
		return
	}
	if add(&q.calls, q.epoch.Load())%uint64(q.every.Load()) == 0 {
		q.now()
	}
}

// withdraw takes one retry from the quota and reports whether there was
// one. Concurrent withdrawals never take more than the window allows: each
// counts its retry only by a compare-and-swap made after its check.
func (q *Quota) withdraw() bool {
	if !q.limited {
		return true
	}
	e := q.now()
	slot := &q.retries[e%quotaBuckets]
	for {
		old := slot.Load()
		if q.available(e) < 1 {
			return false
		}
		if slot.CompareAndSwap(old, bump(old, e)) {
			return true
		}
	}
}

// Available returns how many retries the quota would allow now;
// [math.MaxInt] for the zero Quota and a nil *Quota.
func (q *Quota) Available() int {
	if q == nil || !q.limited {
		return math.MaxInt
	}
	return max(int(q.available(q.now())), 0)
}
