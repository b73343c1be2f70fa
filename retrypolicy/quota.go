package retrypolicy

import (
	"errors"
	"fmt"
	"math"
	"sync"
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
// safe for concurrent use. The zero Quota sets no limit; make one with
// [NewQuota].
type Quota struct {
	ratio  float64
	floor  float64
	bucket time.Duration

	mu      sync.Mutex
	buckets []quotaBucket // ring, one per bucket of time
}

type quotaBucket struct {
	epoch   int64 // which bucket of time this slot holds
	calls   int64
	retries int64
}

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
	const n = 10
	return &Quota{
		ratio:   ratio,
		floor:   floorPerSecond * window.Seconds(),
		bucket:  max(window/n, 1),
		buckets: make([]quotaBucket, n),
	}
}

// slot returns the bucket for now, cleared if it held an older epoch.
func (b *Quota) slot(now time.Time) *quotaBucket {
	epoch := now.UnixNano() / int64(b.bucket)
	s := &b.buckets[epoch%int64(len(b.buckets))]
	if s.epoch != epoch {
		*s = quotaBucket{epoch: epoch}
	}
	return s
}

// totals sums the buckets inside the window ending now.
func (b *Quota) totals(now time.Time) (calls, retries int64) {
	epoch := now.UnixNano() / int64(b.bucket)
	for i := range b.buckets {
		if s := &b.buckets[i]; epoch-s.epoch < int64(len(b.buckets)) {
			calls += s.calls
			retries += s.retries
		}
	}
	return calls, retries
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

// deposit records a call.
func (b *Quota) deposit() {
	if len(b.buckets) == 0 {
		return
	}
	b.mu.Lock()
	b.slot(time.Now()).calls++
	b.mu.Unlock()
}

// withdraw takes one retry from the quota and reports whether there was
// one.
func (b *Quota) withdraw() bool {
	if len(b.buckets) == 0 {
		return true
	}
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.available(now) < 1 {
		return false
	}
	b.slot(now).retries++
	return true
}

func (b *Quota) available(now time.Time) float64 {
	calls, retries := b.totals(now)
	return math.Floor(b.ratio*float64(calls)+b.floor) - float64(retries)
}

// Available returns how many retries the quota would allow now;
// [math.MaxInt] for the zero Quota.
func (b *Quota) Available() int {
	if len(b.buckets) == 0 {
		return math.MaxInt
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return max(int(b.available(time.Now())), 0)
}
