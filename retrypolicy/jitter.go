package retrypolicy

import (
	"math"
	"math/rand/v2"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// JitterMode says how a delay is drawn below its exponential cap.
type JitterMode uint8

// The jitter modes, for [Jitter].
const (
	// Full draws each delay uniformly from [0, cap]: the fewest calls in a
	// storm, at the cost of sometimes retrying almost at once.
	Full JitterMode = iota
	// Equal draws from [cap/2, cap]: never less than half the cap.
	Equal
	// Decorrelated draws from [BaseDelay, 3*previous delay] and caps the
	// draw at MaxDelay (min(MaxDelay, uniform(BaseDelay, 3*previous)), the
	// AWS architecture blog's formula): it grows from the last delay rather
	// than the attempt number. Once at MaxDelay, the next draw is below
	// it with probability (MaxDelay-BaseDelay) / (3*MaxDelay-BaseDelay),
	// about a third, and then anywhere from BaseDelay up, to grow again:
	// in the long run its delays average about half of MaxDelay, a third
	// of them at it (review131).
	Decorrelated
	// None waits exactly cap: the synchronized retries that jitter exists to
	// prevent. For tests and comparisons.
	None
)

// String returns the mode's lower-case name.
func (m JitterMode) String() string {
	switch m {
	case Full:
		return "full"
	case Equal:
		return "equal"
	case Decorrelated:
		return "decorrelated"
	case None:
		return "none"
	default:
		return "unknown"
	}
}

// delaySource yields one call's delays; it is backoff/v4's BackOff, kept out
// of the public API.
type delaySource = backoff.BackOff

// newDelays returns a fresh sequence of delays for one call.
func (c *config) newDelays() delaySource {
	if c.jitter == Decorrelated {
		return &decorrelated{base: c.baseDelay, max: c.maxDelay, prev: c.baseDelay}
	}
	caps := &backoff.ExponentialBackOff{
		InitialInterval: min(c.baseDelay, c.maxDelay),
		Multiplier:      2,
		MaxInterval:     c.maxDelay,
		Stop:            backoff.Stop,
		Clock:           backoff.SystemClock,
	}
	caps.Reset()
	switch c.jitter {
	case Equal:
		return jittered{caps, equal}
	case None:
		return caps
	default:
		return jittered{caps, full}
	}
}

// jittered decorates a sequence of caps with a jitter function.
type jittered struct {
	backoff.BackOff
	draw func(cap time.Duration) time.Duration
}

func (j jittered) NextBackOff() time.Duration {
	c := j.BackOff.NextBackOff()
	if c <= 0 {
		return c
	}
	return j.draw(c)
}

// uniform returns a duration drawn uniformly from [lo, hi], for any
// 0 <= lo <= hi <= math.MaxInt64.
func uniform(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(rand.Uint64N(uint64(hi-lo)+1)) // no overflow: hi-lo <= MaxInt64
}

func full(c time.Duration) time.Duration { return uniform(0, c) }

func equal(c time.Duration) time.Duration { return uniform(c/2, c) }

// decorrelated is the "decorrelated jitter" of the AWS architecture blog:
// sleep = min(cap, random_between(base, sleep*3)).
type decorrelated struct {
	base, max, prev time.Duration
}

func (d *decorrelated) NextBackOff() time.Duration {
	lo := min(d.base, d.max)
	hi := time.Duration(math.MaxInt64)
	if d.prev <= math.MaxInt64/3 {
		hi = d.prev * 3
	}
	d.prev = min(uniform(lo, max(hi, lo)), d.max)
	return d.prev
}

func (d *decorrelated) Reset() { d.prev = d.base }
