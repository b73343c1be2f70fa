package main

import (
	"math"
	"testing"
)

// -maxshort NaN passes the range check (NaN < 0 and NaN >= 1 are both
// false) and is kept: the run then silently falls back to the lag bound
// (o.maxShort > 0 is false), though the user asked for another bound.
// Minor; -maxshort without -realtime is also accepted and ignored.
func TestReview5MaxShortNaNRejected(t *testing.T) {
	o, err := parseArgs([]string{"-grpc", "-maxshort", "NaN"})
	if err == nil {
		t.Errorf("-maxshort NaN accepted: maxShort = %v (NaN: %v)", o.maxShort, math.IsNaN(o.maxShort))
	}
}
