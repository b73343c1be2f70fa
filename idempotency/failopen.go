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
	ended   monotime.Reading // when the guard last stopped running on its local records; 0 if never
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
	// reopenWithin is how long after an outage ended the guard fails open
	// again as soon as most of its claims fail, not after FailOpenAfter: a
	// store that fails some keys and answers others (shards of a cluster
	// down) answers the probes of one and fails the others' claims, and
	// each end of an outage refused those for FailOpenAfter again
	// (review115: 572 of 1,000 requests in a minute).
	reopenWithin = time.Minute
)

// count counts a call at now that failed or not, and reports whether at
// least half of the calls of the last shareBuckets seconds failed; o.mu
// is held.
func (o *outage) count(now monotime.Reading, failed bool) (most bool) {
	e := int64(now / monotime.Reading(time.Second))
	if now < 0 && now%monotime.Reading(time.Second) != 0 {
		e-- // a bubble's readings are negative: floor, not toward zero
	}
	b := &o.buckets[(e%shareBuckets+shareBuckets)%shareBuckets]
	if b.epoch != e {
		b.epoch, b.fails, b.oks = e, 0, 0
	}
	if failed {
		b.fails++
	} else {
		b.oks++
	}
	share, seconds := 0.0, 0
	for _, b := range o.buckets {
		if e-b.epoch < shareBuckets && b.fails+b.oks > 0 {
			share += float64(b.fails) / float64(b.fails+b.oks)
			seconds++
		}
	}
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
	o.note(now, o.count(now, true))
	recent := o.ended != 0 && time.Duration(now-o.ended) < reopenWithin
	if after >= 0 && o.failing && (time.Duration(now-o.since) >= after || recent) {
		o.open, began = true, true
		o.probe = now + monotime.Reading(probeEvery)
	}
	return o.open, began
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
		o.open, o.failing, o.ended = false, false, now
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

// keyOutages follows, key by key, the claims that a store fails while it
// answers others: one shard of a Redis Cluster down, or one master that
// evicts, fails the keys it holds and no others, so that the guard's
// outage, which needs half of all its claims failed, never comes, and
// those keys were refused for as long as the fault lasted (review115). A
// key whose claims have failed without a break for [FailOpenAfter] runs
// on the guard's local records, as every key does once the guard has
// failed open. It keeps at most maxKeyOutages keys; one not claimed for
// keyOutageIdle after its last failure is forgotten. Out of such a fault,
// a claim that gets through costs one atomic load. It is safe for
// concurrent use.
type keyOutages struct {
	n    atomic.Int64 // len(keys)
	mu   sync.Mutex
	keys map[string]keyOutage
}

// keyOutage is when a key's claims began to fail, and last failed.
type keyOutage struct{ first, last monotime.Reading }

const (
	// maxKeyOutages is the most keys keyOutages follows at once.
	maxKeyOutages = 4096
	// keyOutageIdle is how long after its last failed claim a key is
	// forgotten, past FailOpenAfter: its next failure starts anew.
	keyOutageIdle = time.Minute
)

// failed notes a failed claim of key, and reports whether its claims have
// failed, without a break, for after (never if negative).
func (k *keyOutages) failed(key string, after time.Duration) bool {
	if after < 0 {
		return false
	}
	now := monotime.Now()
	idle := after + keyOutageIdle
	k.mu.Lock()
	defer k.mu.Unlock()
	o, ok := k.keys[key]
	if !ok || time.Duration(now-o.last) > idle {
		if !ok && len(k.keys) >= maxKeyOutages {
			for kk, oo := range k.keys {
				if time.Duration(now-oo.last) > idle {
					delete(k.keys, kk)
				}
			}
			if len(k.keys) >= maxKeyOutages {
				return false // the guard's own outage still covers a store that fails this many
			}
		}
		if k.keys == nil {
			k.keys = map[string]keyOutage{}
		}
		o.first = now
	}
	o.last = now
	k.keys[key] = o
	k.n.Store(int64(len(k.keys)))
	return time.Duration(now-o.first) >= after
}

// answered notes a claim of key that got through: its failures end.
func (k *keyOutages) answered(key string) {
	if k.n.Load() == 0 {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.keys, key)
	k.n.Store(int64(len(k.keys)))
}
