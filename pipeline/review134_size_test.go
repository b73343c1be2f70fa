package pipeline

import (
	"testing"
	"unsafe"
)

// review134: outcome's new late flag costs the race no room: the sizes
// measured at the parent commit (3168a68) hold.
func TestReview134Sizes(t *testing.T) {
	if s := unsafe.Sizeof(hedged[int]{}); s > 512 {
		t.Errorf("hedged[int] = %d", s)
	}
	if s := unsafe.Sizeof(hedged[*int]{}); s > 512 {
		t.Errorf("hedged[*int] = %d", s)
	}
	if s := unsafe.Sizeof(outcome[int]{}); s > 56 {
		t.Errorf("outcome[int] = %d, was 56", s)
	}
}
