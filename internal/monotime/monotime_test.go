package monotime

import (
	"math"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
		assert.Equal(t, time.Now().Add(time.Hour), (Now() + Reading(time.Hour)).Time())
	})
	r, now := Now(), time.Now()
	assert.InDelta(t, 0, float64(now.Sub(r.Time())), float64(time.Millisecond), "outside, the monotonic clock's")
	assert.Equal(t, time.Hour, (r + Reading(time.Hour)).Time().Sub(r.Time()), "the monotonic readings, exactly")
	assert.InDelta(t, 0, float64(now.Round(0).Sub(r.Time().Round(0))), float64(time.Millisecond), "the wall clock's")
}

func TestTimeSaturates(t *testing.T) {
	far := Reading(math.MaxInt64).Time()
	assert.True(t, far.After(time.Now().Add(100*365*24*time.Hour)))
	assert.True(t, Reading(math.MinInt64).Time().Before(time.Now().Add(-100*365*24*time.Hour)))
	synctest.Test(t, func(t *testing.T) {
		require.Negative(t, int64(Now()), "a bubble's readings are from before the process's first")
		assert.True(t, Reading(math.MaxInt64).Time().After(time.Now().Add(100*365*24*time.Hour)))
	})
}

func TestAddSaturatesPastTheEndOfTime(t *testing.T) {
	r := Reading(time.Hour)
	assert.Equal(t, Reading(time.Hour+time.Second), r.Add(time.Second))
	assert.Equal(t, Reading(math.MaxInt64), r.Add(math.MaxInt64))
	assert.Equal(t, Reading(math.MaxInt64), Reading(math.MaxInt64).Add(1))
}
