package breakerstore

import (
	"testing"

	"github.com/resiliencekit/resiliencekit/resilience"
)

// TestReview155ParseChangeFormats: the format "gen state" is read as
// before (Previous 0); after review155's finding 2 the store publishes no
// other (replicas of the earlier version drop any other), and a message
// with a third field is dropped as malformed; malformed ones are dropped.
func TestReview155ParseChangeFormats(t *testing.T) {
	for _, c := range []struct {
		in        string
		ok        bool
		state     resilience.State
		gen, prev uint64
	}{
		{"5 0", true, resilience.StateClosed, 5, 0},
		{"5 2", true, resilience.StateOpen, 5, 0},
		{"5 0 4", false, 0, 0, 0},
		{"5 2 4", false, 0, 0, 0},
		{"5 1", false, 0, 0, 0},
		{"5 1 4", false, 0, 0, 0},
		{"5 0 x", false, 0, 0, 0},
		{"5", false, 0, 0, 0},
		{"x 0 4", false, 0, 0, 0},
	} {
		f, ok := parseChange(c.in)
		if ok != c.ok || (ok && (f.State != c.state || f.Generation != c.gen || f.Previous != c.prev)) {
			t.Errorf("parseChange(%q) = %+v, %v", c.in, f, ok)
		}
	}
}
