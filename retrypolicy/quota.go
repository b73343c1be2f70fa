package retrypolicy

import (
	"errors"
	"fmt"
	"math"
	"time"

	windowpkg "github.com/resiliencekit/resiliencekit/internal/window"
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
// traffic still retry. That allowance is a rate, not a store to spend at
// once: in each tenth of the window, retries may number at most a tenth of
// it (and at least one, within the window's allowance), so an outage
// starts with no burst of retries. That has a cost against a healthy
// dependency: a burst of failures that a retry fixes, such as the
// connections a server closed as they idled, met at once by the next
// calls after a quiet spell, has only a tenth of the allowance to retry
// with, and its calls past that fail where a plain retry would have
// completed them (NewQuota(0.1, 10, 10*time.Second) after a lull: 10 of a
// burst of 20 fail, 40 of 50). Give such a service a floor that covers
// its bursts: a tenth of floorPerSecond times the window's seconds. A
// call that finds the quota spent gives up with its last error and
// [ErrQuotaExhausted]. A retry that a pipeline's stage did not send (its
// throttle or concurrency limit refused it, the breaker opened as it
// waited, or its time ran out in the limit's queue) gives its charge
// back; one that was sent keeps it, whatever its error.
//
// One Quota is shared by every [Policy] calling the same dependency. It is
// safe for concurrent use and takes no lock: a call adds to an atomic
// counter, and reads the clock only once in up to 64 calls while calls are
// frequent (every call while they are rare); a retry reads it every time.
// The zero Quota sets no limit; make one with [NewQuota].
type Quota struct {
	limited bool
	ratio   float64
	floor   float64 // retries a window allows whatever the calls
	clock   *windowpkg.Clock
	// Calls and retries per bucket of time.
	calls, retries windowpkg.Ring
}

// NewQuota returns a Quota allowing retries of up to ratio (for example
// 0.1) of the calls plus floorPerSecond retries per second, over a sliding
// window of window (10 s if window is 0), kept in 10 buckets (each known by
// its number mod 2^32: a quota idle for a multiple of 2^32 buckets, to
// within a window, counts its old buckets again; 50 days with a 10 ms
// window, 1,361 years with the default). It panics if
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
	return &Quota{
		limited: true,
		ratio:   ratio,
		floor:   floorPerSecond * window.Seconds(),
		clock:   windowpkg.NewClock(window),
	}
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

// allowance returns how many retries the window ending at e allows, in
// all and in bucket e.
func (q *Quota) allowance(e int64) (inWindow, inBucket float64) {
	inWindow = math.Floor(q.ratio*float64(q.calls.Sum(e)) + q.floor)
	return inWindow, max(math.Floor(inWindow/windowpkg.Buckets), 1)
}

// available returns how many retries the quota allows in bucket e.
func (q *Quota) available(e int64) float64 {
	inWindow, inBucket := q.allowance(e)
	return min(inWindow-float64(q.retries.Sum(e)), inBucket-float64(q.retries.At(e)))
}

// deposit records a call, and returns the bucket it counted it in.
func (q *Quota) deposit() int64 {
	if !q.limited {
		return notCounted
	}
	return q.clock.Tick(&q.calls)
}

// notCounted stands for the bucket of a call whose retry is not to be
// checked against its own count (see take).
const notCounted = math.MinInt64

// withdraw takes one retry from the quota and reports whether there was
// one. Concurrent withdrawals never take more than the quota allows: each
// counts its retry only by a compare-and-swap made after its check, and
// then checks again the window of the clock's bucket, which may have moved
// on meanwhile (and another withdrawal checked that window before this
// one's retry was in it), and gives its retry back if that window is
// over: two withdrawals on either side of a bucket's end may then both
// give theirs back, never both keep them.
func (q *Quota) withdraw() bool {
	_, ok := q.take(nil)
	return ok
}

// take is withdraw, which also returns the bucket the retry was counted
// in, for refund. counted, if not nil, is the bucket that the retrying
// call was counted in (deposit): if that bucket has left the window, as
// after a busy spell and an idle one it may have as it was counted (see
// window.Clock.Tick), the call is counted again now, once, so that a
// call always funds its own retries.
func (q *Quota) take(counted *int64) (bucket int64, ok bool) {
	if !q.limited {
		return 0, true
	}
	e := q.clock.Now(&q.calls)
	if counted != nil && *counted != notCounted && e-*counted >= windowpkg.Buckets {
		q.calls.AddIf(e, anyCount) // not over a newer bucket, if e is a window old by now
		*counted = e
	}
	if !q.retries.AddIf(e, func(uint64) bool { return q.available(e) >= 1 }) {
		return 0, false
	}
	// Counted in a bucket that has left the window meanwhile (the
	// goroutine waited that long), the retry would not be seen.
	if now := q.clock.Epoch(); now-e >= windowpkg.Buckets || q.available(now) < 0 {
		q.retries.Remove(e)
		return 0, false
	}
	return e, true
}

// anyCount lets [windowpkg.Ring.AddIf] count whatever the bucket's count.
func anyCount(uint64) bool { return true }

// refund gives back a retry taken in bucket, that was not made (its caller
// left as it waited to send it), if the window still counts it.
func (q *Quota) refund(bucket int64) {
	if q.limited {
		q.retries.Remove(bucket)
	}
}

// Take takes one retry from the quota, as a retry or a hedge that it
// lets through does, and reports whether there was one; always true for
// the zero Quota and a nil *Quota. Concurrent calls never take more than
// the quota allows.
func (q *Quota) Take() bool { return q == nil || q.withdraw() }

// Available returns how many retries the quota would allow now;
// [math.MaxInt] for the zero Quota and a nil *Quota.
func (q *Quota) Available() int {
	if q == nil || !q.limited {
		return math.MaxInt
	}
	a := q.available(q.clock.Now(&q.calls))
	if a >= math.MaxInt { // a floor beyond any count: a float64 this large does not convert
		return math.MaxInt
	}
	return max(int(a), 0)
}
