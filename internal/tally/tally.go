// Package tally keeps the counts of a pipeline's calls and attempts for a
// listener of the toolkit's own (the registry's), counted on the call path
// with atomic additions, without an event: a listener that embeds [Counts]
// is a [Keeper]. internal/safe recognises a keeper among the listeners it
// is given and counts each attempt in its Counts. It does not tell it of
// attempts; it counts a call, and asks its Counts whether to time it
// ([Counts.Call]), when the pipeline asks, once a call at its start,
// whether the end of the call (resilience.EventCallDone) is wanted; it
// tells it of the end of every call that was timed, and asks its Wants of
// the other kinds only.
package tally

import (
	"errors"
	"math/rand/v2"
	"sync/atomic"

	"github.com/resiliencekit/resiliencekit/internal/classify"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// SampleEvery is how often, one call in so many on average, the Counts
// ask for a call to be timed (see [Counts.Call]).
const SampleEvery = 64

// Counts are a pipeline's calls, and its attempts by whether they were a
// call's first and how they ended: succeeded, failed, refused before
// they were sent (an error of class [resilience.ClassRejected]: the
// throttle's, the concurrency limit's, the breaker's re-check), or
// canceled by the caller (class [resilience.ClassCanceled]: not of
// itself a failure of the dependency's, but failed if it carries an
// answer, a hedged race's whose hedge failed first); an answer of class
// [resilience.ClassPending] is a failed attempt. An attempt adds to one
// counter only. The zero Counts is ready; it is safe
// for concurrent use.
type Counts struct {
	calls                                      atomic.Uint64
	next                                       atomic.Uint64 // the number of the next call to time
	firstOK, firstFailed, laterOK, laterFailed atomic.Uint64
	firstRefused, laterRefused                 atomic.Uint64
	firstCanceled, laterCanceled               atomic.Uint64
}

// Attempt counts an attempt numbered n (1 for a call's first) that ended
// with err.
func (c *Counts) Attempt(n int, err error) {
	first := n == 1
	var k *atomic.Uint64
	switch {
	case err == nil:
		k = pick(first, &c.firstOK, &c.laterOK)
	default:
		switch class(err) {
		case resilience.ClassRejected: // not sent
			k = pick(first, &c.firstRefused, &c.laterRefused)
		case resilience.ClassCanceled:
			if answered(err) { // a hedged race whose hedge failed before the caller hung up: failed, as the breaker counts it
				k = pick(first, &c.firstFailed, &c.laterFailed)
			} else {
				k = pick(first, &c.firstCanceled, &c.laterCanceled)
			}
		default:
			k = pick(first, &c.firstFailed, &c.laterFailed)
		}
	}
	k.Add(1)
}

// answered reports whether err carries the dependency's answer (a
// hedged race's error that its caller's cancellation ended, see
// retrypolicy.Error.Answer); false if its methods panic.
func answered(err error) bool {
	ok, _ := classify.Ask(func(err error) bool {
		var a interface{ Answer() error }
		return errors.As(err, &a) && a.Answer() != nil
	}, err)
	return ok
}

// pick returns a if first, else b.
func pick(first bool, a, b *atomic.Uint64) *atomic.Uint64 {
	if first {
		return a
	}
	return b
}

// class is err's class; an error whose methods panic as it is classified
// is transient: counting a call does not change its outcome.
func class(err error) resilience.Class {
	c, ok := classify.Safely(err)
	if !ok {
		return resilience.ClassTransient
	}
	return c
}

// Call counts a call as it starts, and reports whether it is to be timed.
// The call is chosen as it starts, not by how soon it ends, so that the
// durations timed are not those of the fastest calls, and at a random
// gap (1 to 2*SampleEvery-1 calls, SampleEvery on average), so that a
// workload with a period does not have the same kind of call timed each
// time: the first call, then the first to start once the gap has passed.
func (c *Counts) Call() (timed bool) {
	n := c.calls.Add(1)
	next := c.next.Load()
	return n >= next && c.next.CompareAndSwap(next, n+1+rand.Uint64N(2*SampleEvery-1))
}

// Load returns the counts. The counts of later attempts are read before
// those of first ones, so that every later attempt read has its call's
// first attempt read too.
func (c *Counts) Load() (calls uint64, first, later Outcomes) {
	later = Outcomes{c.laterOK.Load(), c.laterFailed.Load(), c.laterRefused.Load(), c.laterCanceled.Load()}
	first = Outcomes{c.firstOK.Load(), c.firstFailed.Load(), c.firstRefused.Load(), c.firstCanceled.Load()}
	return c.calls.Load(), first, later
}

// Outcomes count attempts by how they ended.
type Outcomes struct{ OK, Failed, Refused, Canceled uint64 }

func (c *Counts) counts() *Counts { return c }

// Keeper is a listener that embeds [Counts] (only a type that does has
// its unexported method) and says which events it wants.
type Keeper interface {
	resilience.Listener
	resilience.Filter
	counts() *Counts
}

// Of returns l as a Keeper and its Counts, if it is one.
func Of(l resilience.Listener) (Keeper, *Counts) {
	if k, ok := l.(Keeper); ok {
		return k, k.counts()
	}
	return nil, nil
}
