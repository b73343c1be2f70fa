package idempotency

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/resiliencekit/resiliencekit/internal/monotime"
)

// outage follows a failing store for a [Guard]. An outage begins with a
// claim that the store fails; the guard fails open, its requests running
// on its local records, once the outage has lasted [FailOpenAfter] with at
// least half of the claims asked failed (so a store that fails one claim
// in two or more cannot refuse most requests without end); it is over
// after healthyRun claims in a row get through, or, failed open, as many
// probes in a row (one request a probeEvery asks the store). It is safe
// for concurrent use.
type outage struct {
	bad        atomic.Bool // in an outage: what a request that finds none need not lock for
	mu         sync.Mutex
	since      monotime.Reading // the outage's first failure
	fails, oks int              // the claims asked since, failed and got through
	run        int              // claims in a row that got through, probes while open
	open       bool             // requests run on the guard's local records
	probe      monotime.Reading // when one may ask the store again, while open
}

const (
	// probeEvery is how often, while a guard runs its requests on its
	// local records, one request asks the store first.
	probeEvery = time.Second
	// healthyRun is how many claims in a row (probes, while failed open)
	// that the store answers end an outage.
	healthyRun = 3
)

// ask reports whether a request should ask the store, and not go straight
// to the guard's local records: always, unless the guard failed open, and
// then for one request a probeEvery.
func (o *outage) ask() bool {
	if !o.bad.Load() {
		return true
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.open {
		return true
	}
	now := monotime.Now()
	if now < o.probe {
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

// failed notes a claim that the store failed, and reports whether the
// requests are now to run on the local records, after after (never if
// negative), and whether they just began to.
func (o *outage) failed(after time.Duration) (open, began bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	now := monotime.Now()
	if !o.bad.Load() {
		o.since, o.fails, o.oks = now, 0, 0
		o.bad.Store(true)
	}
	o.fails++
	o.run = 0
	if !o.open && after >= 0 && time.Duration(now-o.since) >= after && o.fails >= o.oks {
		o.open, began = true, true
		o.probe = now + monotime.Reading(probeEvery)
	}
	return o.open, began
}

// succeeded notes a claim that got through, and reports whether that
// ended the guard's running on its local records.
func (o *outage) succeeded() (ended bool) {
	if !o.bad.Load() {
		return false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.oks++
	o.run++
	if o.run < healthyRun {
		return false
	}
	ended = o.open
	o.open = false
	o.bad.Store(false)
	return ended
}
