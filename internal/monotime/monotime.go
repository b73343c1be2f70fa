// Package monotime reads the monotonic clock alone, for durations. A
// duration needs no wall clock, yet time.Now reads both clocks: a
// reading here costs one clock read where time.Now costs two, and a
// duration between two readings is what time.Since would give.
package monotime

import "time"

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

// Time returns r as a time.Time, for a deadline to give in a
// context.Context: its monotonic reading is r's, so that time.Until and
// any comparison with another time.Time read from the monotonic clock
// measure from it exactly, as from time.Now().Add(d) taken at r. Its wall
// clock reading is the process's first one plus the time elapsed since,
// which drifts from the wall clock by whatever the wall clock was stepped
// by since then. A reading from before the process's first, as every
// reading in a testing/synctest bubble is (its clock starts in 2000), has
// no monotonic reading, as the bubble's own times: its wall clock reading
// is then the bubble's exactly.
func (r Reading) Time() time.Time {
	t := base.Add(time.Duration(r))
	if r < 0 {
		return t.Round(0)
	}
	return t
}
