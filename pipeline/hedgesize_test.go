package pipeline

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
)

// A hedged call that finds no spare allocates its state and first race as
// one object, within 512 bytes for a small result: the largest size the
// allocator serves, and the collector scans, without a header per object.
func TestAHedgedCallFitsAnObjectWithoutHeader(t *testing.T) {
	assert.LessOrEqual(t, unsafe.Sizeof(hedged[int]{}), uintptr(512))
	assert.LessOrEqual(t, unsafe.Sizeof(hedged[*int]{}), uintptr(512))
}
