package limit_test

// review169: extreme limits.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/limit"
)

// TestReview169FixedLimitReported: Limit() reports the limit a fixed
// Limiter was made with ("the most attempts it lets hold a slot at
// once").
func TestReview169FixedLimitReported(t *testing.T) {
	for _, n := range []int{1, 2, 1000, 1 << 40, 1<<53 + 1, math.MaxInt/2 + 1, math.MaxInt - 1, math.MaxInt} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			l := limit.NewFixed(n)
			if got := l.Limit(); got != n {
				t.Errorf("NewFixed(%d).Limit() = %d", n, got)
			}
		})
	}
}

// TestReview169FixedAdmitsExactlyN: NewFixed(n) admits n and refuses the
// n+1th (for small n; for huge n, admits every attempt made).
func TestReview169FixedAdmitsExactlyN(t *testing.T) {
	for _, n := range []int{1, 2, 3, 1<<53 + 1, math.MaxInt} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			l := limit.NewFixed(n)
			var tks []limit.Ticket
			for i := range min(n, 1000) {
				tk, err := l.Acquire(context.Background())
				if err != nil {
					t.Fatalf("attempt %d of %d refused: %v", i, n, err)
				}
				tks = append(tks, tk)
			}
			if n <= 1000 {
				if _, err := l.Acquire(context.Background()); !errors.Is(err, limit.ErrLimited) {
					t.Fatalf("attempt %d of a limit of %d: %v", n+1, n, err)
				}
			}
			for _, tk := range tks {
				l.Release(tk, nil)
			}
			if l.InFlight() != 0 {
				t.Fatalf("in flight %d", l.InFlight())
			}
		})
	}
}

// TestReview169AIMDStaysInBounds: an adaptive limit at extreme Min, Max
// and Backoff stays within [Min, Max] through successes and failures,
// and never refuses a lone attempt (Min >= 1).
func TestReview169AIMDStaysInBounds(t *testing.T) {
	cases := []struct{ min, initial, max int }{
		{1, 1, 1}, {1, 1, math.MaxInt}, {math.MaxInt, math.MaxInt, math.MaxInt}, {1, math.MaxInt, math.MaxInt}, {1 << 53, 1<<53 + 1, math.MaxInt},
	}
	for _, tc := range cases {
		for _, bo := range []float64{0.5, 0.9, math.Nextafter(1, 0)} {
			t.Run(fmt.Sprintf("%d/%d/%d/%g", tc.min, tc.initial, tc.max, bo), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					l := limit.NewAIMD(limit.Min(tc.min), limit.Initial(tc.initial), limit.Max(tc.max), limit.Backoff(bo))
					boom := errors.New("overload")
					for i := range 3000 {
						tk, err := l.Acquire(context.Background())
						if err != nil {
							t.Fatalf("attempt %d refused with nothing in flight: %v (limit %d)", i, err, l.Limit())
						}
						var e error
						if i%3 == 0 {
							e = boom
						}
						l.Release(tk, e)
						got := l.Limit()
						lo := tc.min
						if got < lo || (tc.max < math.MaxInt/2 && got > tc.max) {
							t.Fatalf("after %d attempts: limit %d outside [%d, %d]", i+1, got, tc.min, tc.max)
						}
						if i%100 == 0 {
							time.Sleep(time.Millisecond)
						}
					}
				})
			})
		}
	}
}
