package hedge

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// An Observe that has counted its latency but not yet written it, while
// another updates the quantile: the slot is left out, not read as 0.
func TestUpdateLeavesOutSlotsNotYetWritten(t *testing.T) {
	p := New(Quantile(0.01))
	for range minSeen + 8 {
		p.Observe(time.Second)
	}
	n := p.seen.Add(1) // counted, not written
	p.update(n)
	d, ok := p.After()
	assert.True(t, ok)
	assert.Equal(t, time.Second, d)

	p.Observe(0) // a latency of 0 (a fake clock) is one, though
	p.Observe(0)
	p.update(min(p.seen.Load(), kept))
	d, ok = p.After()
	assert.True(t, ok)
	assert.Equal(t, time.Nanosecond, d, "the least delay")
}
