package idempotency

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/resiliencekit/resiliencekit/internal/monotime"
)

// outage follows a failing store for a [Guard], from the claims the
// guard asks of it (its requests' and its probes'). The guard fails open,
// its requests claimed on its local records, once at least half of those
// claims have failed, without a break, for [FailOpenAfter]: half as the
// mean, over the seconds of the last shareBuckets that saw a claim, of
// each second's share of failed claims, so that neither a store that
// answers a few claims nor one that answered many before it went down
// (whatever the rate of claims then and since) can refuse most requests
// for longer than FailOpenAfter and half the window. Failed open, one
// request a probeEvery asks the store with a claim of its own (probe);
// healthyRun answered in a row end it. Out of an outage, a call that gets
// through costs one atomic load. It is safe for concurrent use.
type outage struct {
	bad     atomic.Bool // in an outage: counting calls, or failed open
	mu      sync.Mutex
	buckets [shareBuckets]second
	failing bool             // at least half the window's calls failed, since since
	since   monotime.Reading //
	run     int              // calls in a row that got through
	open    bool             // requests run on the guard's local records
	probe   monotime.Reading // when one may ask the store again, while open
}

// second counts the claims of one second.
type second struct {
	epoch      int64 // the second counted, since monotime's start
	fails, oks int
}

const (
	// probeEvery is how often, while a guard runs its requests on its
	// local records, one request asks the store first.
	probeEvery = time.Second
	// healthyRun is how many calls in a row (probes, while failed open)
	// that the store answers end an outage.
	healthyRun = 3
	// shareBuckets is the seconds over which the share of failed calls
	// is counted.
	shareBuckets = 10
)

// epochOf returns the second of now, since monotime's start.
func epochOf(now monotime.Reading) int64 {
	e := int64(now / monotime.Reading(time.Second))
	if now < 0 && now%monotime.Reading(time.Second) != 0 {
		e-- // a bubble's readings are negative: floor, not toward zero
	}
	return e
}

// window returns, over the seconds of the last shareBuckets up to second
// e that saw a call, the sum of each second's share of failed calls, and
// how many such seconds there were; o.mu is held.
func (o *outage) window(e int64) (share float64, seconds int) {
	for _, b := range o.buckets {
		if e-b.epoch < shareBuckets && b.fails+b.oks > 0 {
			share += float64(b.fails) / float64(b.fails+b.oks)
			seconds++
		}
	}
	return share, seconds
}

// quiet reports whether the last shareBuckets seconds before now saw no
// call; o.mu is held.
func (o *outage) quiet(now monotime.Reading) bool {
	_, seconds := o.window(epochOf(now))
	return seconds == 0
}

// count counts a call at now that failed or not, and reports whether at
// least half of the calls of the last shareBuckets seconds failed; o.mu
// is held.
func (o *outage) count(now monotime.Reading, failed bool) (most bool) {
	e := epochOf(now)
	b := &o.buckets[(e%shareBuckets+shareBuckets)%shareBuckets]
	if b.epoch != e {
		b.epoch, b.fails, b.oks = e, 0, 0
	}
	if failed {
		b.fails++
	} else {
		b.oks++
	}
	return o.most(e)
}

// most reports whether at least half of the claims of the last
// shareBuckets seconds up to second e failed; o.mu is held.
func (o *outage) most(e int64) bool {
	share, seconds := o.window(e)
	return share > 0 && share >= float64(seconds)/2
}

// note updates whether most calls fail, and since when; o.mu is held.
func (o *outage) note(now monotime.Reading, most bool) {
	switch {
	case !most:
		o.failing = false
	case !o.failing:
		o.failing, o.since = true, now
	}
}

// turn reports whether the guard has failed open and it is a request's
// turn, one a probeEvery, to ask the store.
func (o *outage) turn() bool {
	if !o.bad.Load() {
		return false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	now := monotime.Now()
	if !o.open || now < o.probe {
		return false
	}
	o.probe = now + monotime.Reading(probeEvery)
	return true
}

// isOpen reports whether the guard runs its requests on its local records.
func (o *outage) isOpen() bool {
	if !o.bad.Load() {
		return false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.open
}

// failed notes a call that the store failed, and reports whether the
// requests are now to run on the local records, after after (never if
// negative), and whether they just began to.
func (o *outage) failed(after time.Duration) (open, began bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	now := monotime.Now()
	o.bad.Store(true)
	o.run = 0
	if o.open {
		return true, false // a probe's: the window is for opening
	}
	if o.quiet(now) {
		// A failure after a silence is the first of its own: one before
		// the silence says nothing of the store now (review116: two
		// transient errors five minutes apart on a quiet guard failed it
		// open, and a stored key ran again).
		o.failing = false
	}
	o.note(now, o.count(now, true))
	if after >= 0 && o.failing && time.Duration(now-o.since) >= after {
		o.open, began = true, true
		o.probe = now + monotime.Reading(probeEvery)
	}
	return o.open, began
}

// settled reports whether the store has answered healthyRun calls in a
// row (requests' or probes') and, before the guard failed open, fewer
// than half of the window's; if so it ends the run of failures: the next
// failure begins one of its own. One answer is not enough, nor a few in a
// row: a store that fails most claims answers some now and then
// (review152: each answered probe restarted the clock, and a store
// failing 3 claims of 4 was refused for a minute and more).
func (o *outage) settled() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.run < healthyRun {
		return false
	}
	if o.open {
		return true
	}
	// Nor answers in a row of a store that fails most claims still: the
	// run of failures goes on, and the probes with it.
	if o.most(epochOf(monotime.Now())) {
		return false
	}
	o.failing = false
	return true
}

// succeeded notes a call that got through, and reports whether that ended
// the guard's running on its local records.
func (o *outage) succeeded() (ended bool) {
	if !o.bad.Load() {
		return false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	now := monotime.Now()
	o.run++
	if o.open {
		if o.run < healthyRun {
			return false
		}
		o.open, o.failing = false, false
		o.buckets = [shareBuckets]second{} // the next outage counts from its own first failure
		o.bad.Store(false)
		return true
	}
	most := o.count(now, false)
	o.note(now, most)
	if !most && o.run >= healthyRun {
		o.bad.Store(false)
	}
	return false
}
