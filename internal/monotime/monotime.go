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
