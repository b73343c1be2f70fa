// Package monotime reads the monotonic clock alone, for durations. A
// duration needs no wall clock, yet time.Now reads both clocks: a
// reading here costs one clock read where time.Now costs two, and a
// duration between two readings is what time.Since would give.
package monotime

import (
	"math"
	"time"
)

// base is the reading the others are taken from; it has a monotonic
// reading, so that time.Since(base) reads the monotonic clock only.
var base = time.Now()

// Reading is a reading of the monotonic clock, comparable only with
// another Reading of the same process.
type Reading time.Duration

// Now returns a reading of the monotonic clock. It is safe for concurrent
// use.
func Now() Reading { return Reading(time.Since(base)) }

// Since returns the time elapsed since r.
func Since(r Reading) time.Duration { return time.Duration(Now() - r) }

// Add returns the reading d after r, or the last reading there is
// (math.MaxInt64) if that is past it: a deadline past the end of time is
// none, as time.Time.Add saturates.
func (r Reading) Add(d time.Duration) Reading {
	if at := r + Reading(d); at >= r {
		return at
	}
	return math.MaxInt64
}

// Time returns r as a time.Time, for a deadline to give in a
// context.Context, as time.Now().Add(d) would have given it at the
// reading d before r: its monotonic reading is r's exactly, and its wall
// clock reading is the wall clock's now plus the time left to r, so that
// a comparison with a time that has no monotonic reading holds even after
// the wall clock was stepped. It reads both clocks, as time.Now does. In
// a testing/synctest bubble, whose times have no monotonic reading, it is
// the bubble's time exactly. A reading too far from now for a
// time.Duration is taken as the farthest one.
func (r Reading) Time() time.Time {
	now := time.Now()
	n := Reading(now.Sub(base))
	left := r - n
	if (r > n) != (left > 0) && r != n { // overflow
		left = math.MaxInt64
		if r < n {
			left = math.MinInt64
		}
	}
	return now.Add(time.Duration(left))
}
