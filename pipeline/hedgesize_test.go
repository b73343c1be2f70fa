package pipeline

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
)

// A hedged call that never hedges allocates its state and its first race's
// first attempt as one object (the race's memory is reused), small enough
// for a size class of 208 bytes, whatever the result type.
func TestAHedgedCallAllocatesASmallObject(t *testing.T) {
	assert.LessOrEqual(t, unsafe.Sizeof(hedged{}), uintptr(208))
}
