package limit_test

import (
	"context"
	"errors"
	"math"
	"testing"

	"github.com/resiliencekit/resiliencekit/limit"
)

// review170: Limit says how many attempts Acquire lets hold a slot at
// once, through rounds of growth and backoff, and stays within Min and
// Max; and the edges of a fixed limit.
func TestReview170LimitMatchesAdmissions(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name                string
		initial, lo, hi     int
		growRounds, backoff int
	}{
		{"small", 3, 2, 9, 12, 8},
		{"min=max", 4, 4, 4, 5, 5},
		{"lo1", 1, 1, 5, 20, 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := limit.NewAIMD(limit.Initial(tc.initial), limit.Min(tc.lo), limit.Max(tc.hi), limit.Backoff(0.5))
			round := func(err error) {
				var tks []limit.Ticket
				for {
					tk, e := l.Acquire(ctx)
					if e != nil {
						if !errors.Is(e, limit.ErrLimited) {
							t.Fatal(e)
						}
						break
					}
					tks = append(tks, tk)
					if len(tks) > 1000 {
						t.Fatal("no limit")
					}
				}
				if got := l.Limit(); got != len(tks) || got < tc.lo || got > tc.hi {
					t.Fatalf("Limit() %d, admitted %d, bounds [%d, %d]", got, len(tks), tc.lo, tc.hi)
				}
				for _, tk := range tks {
					l.Release(tk, err)
				}
			}
			for range tc.growRounds {
				round(nil)
			}
			for range tc.backoff {
				round(errors.New("dependency failed"))
			}
			for range tc.growRounds {
				round(nil)
			}
		})
	}
}

func TestReview170FixedLimitEdges(t *testing.T) {
	for _, n := range []int{1, 1<<53 - 1, 1 << 53, 1<<53 + 1, 1<<62 + 1, math.MaxInt - 1, math.MaxInt} {
		if got := limit.NewFixed(n).Limit(); got != n {
			t.Errorf("NewFixed(%d).Limit() = %d", n, got)
		}
		l := limit.NewAIMD(limit.Initial(n), limit.Min(n), limit.Max(n))
		if got := l.Limit(); got != n {
			t.Errorf("NewAIMD(Initial=Min=Max=%d).Limit() = %d", n, got)
		}
	}
	l := limit.NewAIMD(limit.Initial(math.MaxInt), limit.Max(math.MaxInt))
	if got := l.Limit(); got != math.MaxInt {
		t.Errorf("AIMD at MaxInt: %d", got)
	}
}
