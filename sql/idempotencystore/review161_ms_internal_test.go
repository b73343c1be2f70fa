package idempotencystore

import (
	"math"
	"testing"
	"time"
)

// ms never cuts a positive lease short, never gives a positive one 0, and
// does not overflow.
func TestReview161_MsRoundsUp(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want int64
	}{
		{0, 0}, {1, 1}, {900 * time.Microsecond, 1}, {time.Millisecond, 1}, {time.Millisecond + 1, 2},
		{1500 * time.Millisecond, 1500}, {time.Duration(math.MaxInt64), math.MaxInt64/1000000 + 1},
		{-1, 0}, {-time.Millisecond - 1, -1},
	} {
		if got := ms(tc.d); got != tc.want {
			t.Errorf("ms(%v) = %d, want %d", tc.d, got, tc.want)
		}
		if tc.d > 0 && time.Duration(ms(tc.d))*time.Millisecond < tc.d && tc.d < time.Duration(math.MaxInt64)-time.Millisecond {
			t.Errorf("ms(%v) cuts it short", tc.d)
		}
	}
}
