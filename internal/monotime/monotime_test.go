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

func TestTimeIsTheReadingsInstant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := Now()
		assert.Equal(t, time.Now(), r.Time(), "in a bubble, the bubble's clock, with no monotonic reading")
		time.Sleep(time.Second)
		assert.Equal(t, time.Second, time.Since(r.Time()))
		assert.Equal(t, -time.Minute, time.Until((r + Reading(time.Second-time.Minute)).Time()))
	})
	r, now := Now(), time.Now()
	assert.InDelta(t, 0, float64(now.Sub(r.Time())), float64(time.Millisecond), "outside, the monotonic clock's")
	assert.Equal(t, time.Hour, (r + Reading(time.Hour)).Time().Sub(r.Time()))
}
