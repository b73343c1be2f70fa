package registry

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// The reference: k pushes, dropping the oldest beyond the capacity.
func review46Ref(xs []uint64, c, k int, total uint64) []uint64 {
	out := slices.Clone(xs)
	n := uint64(k)
	for i := 0; i < k; i++ {
		v := total / n
		if i == k-1 {
			v += total % n
		}
		out = append(out, v)
		if len(out) > c {
			out = out[1:]
		}
	}
	return out
}

func TestReview46_SpreadOneMatchesPushes(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for it := 0; it < 200000; it++ {
		c := 1 + r.IntN(8)
		xs := make([]uint64, 0, c)
		for i := 0; i < r.IntN(c+1); i++ {
			xs = append(xs, r.Uint64N(100))
		}
		k := 1 + r.IntN(3*c)
		total := r.Uint64N(1000)
		if it%7 == 0 {
			total = math.MaxUint64 - r.Uint64N(10)
		}
		want := review46Ref(xs, c, k, total)
		got := spreadOne(slices.Clone(xs)[:len(xs):len(xs)], k, shareOf(total, k)) // cap must be c: rebuild
		got2 := make([]uint64, len(xs), c)
		copy(got2, xs)
		got = spreadOne(got2, k, shareOf(total, k))
		if !slices.Equal(got, want) || cap(got) != c {
			t.Fatalf("cap %d, xs %v, k %d, total %d: got %v (cap %d), want %v", c, xs, k, total, got, cap(got), want)
		}
	}
}

// No panic for any k (the registry only passes 1 to the capacity).
func TestReview46_SpreadOneAnyK(t *testing.T) {
	for _, k := range []int{0, -1, math.MinInt, math.MaxInt} {
		t.Run(fmt.Sprint(k), func(t *testing.T) {
			defer func() {
				if v := recover(); v != nil {
					t.Errorf("spreadOne(k=%d) panicked: %v", k, v)
				}
			}()
			xs := make([]uint64, 2, 4)
			_ = spreadOne(xs, k, shareOf(10, k))
		})
	}
}
