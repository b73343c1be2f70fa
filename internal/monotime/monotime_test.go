package monotime

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestSinceMeasuresAsTimeSince(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, start := Now(), time.Now()
		time.Sleep(1500 * time.Millisecond)
		assert.Equal(t, time.Since(start), Since(r))
		assert.Equal(t, 1500*time.Millisecond, Since(r))
	})
	r := Now()
	time.Sleep(time.Millisecond)
	assert.GreaterOrEqual(t, Since(r), time.Millisecond, "in real time too")
}
