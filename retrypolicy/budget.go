package retrypolicy

import (
	"errors"
	"math"
	"sync"
	"time"
)

// ErrBudgetExhausted is the reason a call stopped retrying because its
// [Budget] had no retry left.
var ErrBudgetExhausted = errors.New("retry budget exhausted")

// Budget caps the retries of all calls to one dependency at a share of
// those calls, so that in an outage retries add a bounded load rather than
// multiplying it (the retry budgets of Google's SRE book and Finagle). Over
// a sliding window, retries may number at most ratio times the calls plus
// a floor of floorPerSecond per second of the window, which lets a service
// with little traffic still retry. A call that finds the budget spent gives
// up with its last error and [ErrBudgetExhausted].
//
// One Budget is shared by every [Policy] (or pipeline) calling the same
// dependency. It is safe for concurrent use.
type Budget struct {
	ratio  float64
	floor  float64
	bucket time.Duration

	mu      sync.Mutex
	buckets []budgetBucket // ring, one per bucket of time
}

type budgetBucket struct {
	epoch   int64 // which bucket of time this slot holds
	calls   int64
	retries int64
}

// NewBudget returns a Budget allowing retries of up to ratio (for example
// 0.1) of the calls plus floorPerSecond retries per second, over a sliding
// window of window (10 s if window <= 0), kept in 10 buckets.
func NewBudget(ratio float64, floorPerSecond float64, window time.Duration) *Budget {
	if window <= 0 {
		window = 10 * time.Second
	}
	const n = 10
	return &Budget{
		ratio:   max(ratio, 0),
		floor:   max(floorPerSecond, 0) * window.Seconds(),
		bucket:  max(window/n, 1),
		buckets: make([]budgetBucket, n),
	}
}

// slot returns the bucket for now, cleared if it held an older epoch.
func (b *Budget) slot(now time.Time) *budgetBucket {
	epoch := now.UnixNano() / int64(b.bucket)
	s := &b.buckets[epoch%int64(len(b.buckets))]
	if s.epoch != epoch {
		*s = budgetBucket{epoch: epoch}
	}
	return s
}

// totals sums the buckets inside the window ending now.
func (b *Budget) totals(now time.Time) (calls, retries int64) {
	epoch := now.UnixNano() / int64(b.bucket)
	for i := range b.buckets {
		if s := &b.buckets[i]; epoch-s.epoch < int64(len(b.buckets)) {
			calls += s.calls
			retries += s.retries
		}
	}
	return calls, retries
}

// deposit records a call.
func (b *Budget) deposit() {
	b.mu.Lock()
	b.slot(time.Now()).calls++
	b.mu.Unlock()
}

// withdraw takes one retry from the budget and reports whether there was
// one.
func (b *Budget) withdraw() bool {
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.available(now) < 1 {
		return false
	}
	b.slot(now).retries++
	return true
}

func (b *Budget) available(now time.Time) float64 {
	calls, retries := b.totals(now)
	return math.Floor(b.ratio*float64(calls)+b.floor) - float64(retries)
}

// Available returns how many retries the budget would allow now.
func (b *Budget) Available() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return max(int(b.available(time.Now())), 0)
}
