// Package tally keeps the counts of a pipeline's attempts for a listener
// of the toolkit's own (the registry's), counted on the call path with
// atomic additions, without an event: a listener that embeds [Counts] is
// a [Keeper]. internal/safe recognises a keeper among the listeners it is
// given and counts each attempt in its Counts. It does not tell it of
// attempts, tells it of the end of a call (resilience.EventCallDone) when
// its Counts ask for the call to be timed ([Counts.TimeNext]), and asks
// its Wants of the other kinds only.
package tally

import (
	"sync/atomic"

	"github.com/resiliencekit/resiliencekit/resilience"
)

// SampleEvery is how often, one attempt in so many of each kind, the
// Counts mark the next call to be timed (see [Counts.TimeNext]).
const SampleEvery = 64

// Counts are a pipeline's attempts by whether they were a call's first
// and whether they succeeded: an attempt adds to one counter only. The
// zero Counts is ready; it is safe for concurrent use.
type Counts struct {
	firstOK, firstFailed, laterOK, laterFailed atomic.Uint64
	timeNext                                   atomic.Bool
}

// Attempt counts an attempt numbered n (1 for a call's first) that ended
// with err.
func (c *Counts) Attempt(n int, err error) {
	var k *atomic.Uint64
	switch {
	case n == 1 && err == nil:
		k = &c.firstOK
	case n == 1:
		k = &c.firstFailed
	case err == nil:
		k = &c.laterOK
	default:
		k = &c.laterFailed
	}
	if k.Add(1)%SampleEvery == 0 {
		c.timeNext.Store(true)
	}
}

// Load returns the counts.
func (c *Counts) Load() (firstOK, firstFailed, laterOK, laterFailed uint64) {
	return c.firstOK.Load(), c.firstFailed.Load(), c.laterOK.Load(), c.laterFailed.Load()
}

// TimeNext reports whether the next call is to be timed: an attempt
// count reached a multiple of [SampleEvery] since the last [Counts.Timed].
func (c *Counts) TimeNext() bool { return c.timeNext.Load() }

// Timed records that a call was timed.
func (c *Counts) Timed() { c.timeNext.Store(false) }

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
