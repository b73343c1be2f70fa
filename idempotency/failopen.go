package idempotency

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/resiliencekit/resiliencekit/internal/monotime"
)

// outage follows a failing store for a [Guard]: since when its claims have
// failed without one getting through, and, once that is [FailOpenAfter],
// when a request may next ask it again. It is safe for concurrent use.
type outage struct {
	bad     atomic.Bool // failing or open: what a request that finds neither need not lock for
	mu      sync.Mutex
	failing bool             // the last claim asked of the store failed
	since   monotime.Reading // the first failure in a row
	open    bool             // requests run on the guard's local records
	probe   monotime.Reading // when one may ask the store again, while open
}

// probeEvery is how often, while a guard runs its requests on its local
// records, one request asks the store first.
const probeEvery = time.Second

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

// failed notes a claim that the store failed, and reports whether the
// requests are now to run on the local records, after after (never if
// negative), and whether they just began to.
func (o *outage) failed(after time.Duration) (open, began bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	now := monotime.Now()
	if !o.failing {
		o.failing, o.since = true, now
		o.bad.Store(true)
	}
	if !o.open && after >= 0 && time.Duration(now-o.since) >= after {
		o.open, began = true, true
		o.probe = now + monotime.Reading(probeEvery)
	}
	return o.open, began
}

// succeeded notes a claim that got through, and reports whether the
// requests had run on the local records until then.
func (o *outage) succeeded() (ended bool) {
	if !o.bad.Load() {
		return false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	ended = o.open
	o.failing, o.open = false, false
	o.bad.Store(false)
	return ended
}
