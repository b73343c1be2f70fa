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
// counter, and reads the clock only once in 64 calls; only a retry reads it
// every time. The zero Quota sets no limit; make one with [NewQuota].
type Quota struct {
	limited bool
	ratio   float64
	floor   float64
	bucket  int64 // nanoseconds of time per bucket
	start   time.Time

	epoch atomic.Int64 // the latest bucket of time seen since start
	// Rings of counters, one slot per bucket of time: a slot packs the
	// bucket it counts (its epoch, mod 2^tagBits) with the count, so that
	// a stale slot is reset and counted in one compare-and-swap.
	calls, retries [quotaBuckets]atomic.Uint64
}

const (
	quotaBuckets = 10
	tagBits      = 24
	countBits    = 64 - tagBits
	countMask    = 1<<countBits - 1
	tagMask      = 1<<tagBits - 1
	refreshEvery = 64 // calls between clock reads of deposit
)

// NewQuota returns a Quota allowing retries of up to ratio (for example
// 0.1) of the calls plus floorPerSecond retries per second, over a sliding
// window of window (10 s if window is 0), kept in 10 buckets. It panics if
// ratio or floorPerSecond is negative, infinite or NaN, or window negative.
func NewQuota(ratio float64, floorPerSecond float64, window time.Duration) *Quota {
	if !finite(ratio) || ratio < 0 {
		panic(fmt.Sprintf("retrypolicy: NewQuota ratio %v is not a finite number >= 0", ratio))
	}
	if !finite(floorPerSecond) || floorPerSecond < 0 {
		panic(fmt.Sprintf("retrypolicy: NewQuota floorPerSecond %v is not a finite number >= 0", floorPerSecond))
	}
	if window < 0 {
		panic(fmt.Sprintf("retrypolicy: NewQuota window %v is negative", window))
	}
	if window == 0 {
		window = 10 * time.Second
	}
	return &Quota{
		limited: true,
		ratio:   ratio,
		floor:   floorPerSecond * window.Seconds(),
		bucket:  max(int64(window/quotaBuckets), 1),
		start:   time.Now(),
	}
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

// age returns how many buckets of time slot word w is behind epoch e:
// negative if it is ahead (another goroutine saw a later clock).
func age(w uint64, e int64) int64 {
	d := (uint64(e) - w>>countBits) & tagMask
	if d >= 1<<(tagBits-1) {
		return int64(d) - 1<<tagBits
	}
	return int64(d)
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

// now reads the clock and returns the current bucket of time.
func (q *Quota) now() int64 {
	e := int64(time.Since(q.start)) / q.bucket
	for {
		seen := q.epoch.Load()
		if e <= seen || q.epoch.CompareAndSwap(seen, e) {
			return max(e, seen)
		}
	}
}

// sum returns the counts of ring's slots within the window ending at e.
func sum(ring *[quotaBuckets]atomic.Uint64, e int64) uint64 {
	var n uint64
	for i := range ring {
		w := ring[i].Load()
		if a := age(w, e); a >= 0 && a < quotaBuckets {
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
	if add(&q.calls, q.epoch.Load())%refreshEvery == 0 {
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
