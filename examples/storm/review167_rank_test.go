package main

import (
	"math/big"
	"slices"
	"testing"
	"time"
)

// nearestRank is the textbook nearest rank, in exact arithmetic: the
// least value with at least a share p of the sample at or below it.
func r167NearestRank(sorted []time.Duration, num, den int64) time.Duration {
	n := int64(len(sorted))
	r := new(big.Rat).Mul(big.NewRat(num, den), big.NewRat(n, 1))
	k := new(big.Int).Quo(r.Num(), r.Denom())
	if new(big.Rat).SetInt(k).Cmp(r) < 0 {
		k.Add(k, big.NewInt(1))
	}
	i := max(k.Int64()-1, 0)
	return sorted[i]
}

// Promise (CHANGELOG review166): p50/p99 by nearest rank; the p99 of
// two durations is the larger. Small samples, and every size to 2000.
func TestReview167PercentileNearestRank(t *testing.T) {
	for n := 1; n <= 2000; n++ {
		s := make([]time.Duration, n)
		for i := range s {
			s[i] = time.Duration(i+1) * time.Millisecond
		}
		for _, p := range []struct {
			f        float64
			num, den int64
		}{{0.5, 1, 2}, {0.99, 99, 100}, {0.9, 9, 10}, {0.95, 19, 20}} {
			if got, want := percentile(s, p.f), r167NearestRank(s, p.num, p.den); got != want {
				t.Fatalf("n=%d p=%v: %v, want %v", n, p.f, got, want)
			}
		}
	}
	two := []time.Duration{time.Millisecond, 9 * time.Millisecond}
	if percentile(two, 0.99) != 9*time.Millisecond || percentile(two, 0.5) != time.Millisecond {
		t.Error("p99 of two is not the larger, or p50 not the smaller")
	}
	if ms(nil, 0.5) != "-" {
		t.Error("ms of no sample")
	}
}

// Promise: a run that fell behind is refused: with -maxshort, any call
// that started 100 ms late or more; without, a p99 over 2 ms or a worst
// over 20 ms. Small samples: one late call among two.
func TestReview167BehindRefusesLateRuns(t *testing.T) {
	mk := func(late ...time.Duration) []result { return []result{{late: late}} }
	cases := []struct {
		late     []time.Duration
		maxShort float64
		behind   bool
	}{
		{[]time.Duration{0, 100 * time.Millisecond}, 0.05, true},
		{[]time.Duration{0, 99 * time.Millisecond}, 0.05, false},
		{[]time.Duration{100 * time.Millisecond}, 0.05, true},
		{[]time.Duration{0, 3 * time.Millisecond}, 0, true},  // p99 of two is the larger: 3 ms > 2 ms
		{[]time.Duration{0, 21 * time.Millisecond}, 0, true}, // worst
		{[]time.Duration{time.Millisecond, 2 * time.Millisecond}, 0, false},
		{nil, 0, false},
	}
	for _, c := range cases {
		got, why := behind(mk(c.late...), c.maxShort)
		if got != c.behind {
			t.Errorf("late %v maxshort %v: behind %v, want %v (%s)", c.late, c.maxShort, got, c.behind, why)
		}
	}
	// A run's own late values are not sorted in place by lag().
	r := result{late: []time.Duration{5, 1, 3}}
	_, _ = r.lag()
	if !slices.Equal(r.late, []time.Duration{5, 1, 3}) {
		t.Error("lag sorted the run's values in place")
	}
}
