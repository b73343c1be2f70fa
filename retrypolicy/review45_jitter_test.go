package retrypolicy

import (
	"math"
	"testing"
	"time"
)

// Full jitter: retry n's delay is uniform on [0, cap(n)]: chi-square over
// 20 bins, both ends reached, mean cap/2.
func TestReview45FullJitterUniform(t *testing.T) {
	const draws = 200000
	base := 1000 * time.Nanosecond
	for n := range 5 {
		c := r45cap(base, 10*time.Microsecond, n)
		var bins [20]int
		sum := 0.0
		lo, hi := time.Duration(math.MaxInt64), time.Duration(0)
		for range draws {
			d := r45nth(New(BaseDelay(base), MaxDelay(10*time.Microsecond)), n)
			if d < 0 || d > c {
				t.Fatalf("retry %d: %v outside [0,%v]", n, d, c)
			}
			b := int(float64(d) / float64(c+1) * 20)
			bins[b]++
			sum += float64(d)
			lo, hi = min(lo, d), max(hi, d)
		}
		chi := 0.0
		exp := float64(draws) / 20
		for _, o := range bins {
			chi += (float64(o) - exp) * (float64(o) - exp) / exp
		}
		// 19 degrees of freedom: p=0.000003 critical value 60 (p=0.001's,
		// 43.8, failed about once in 200 runs: several retries are tested,
		// and the bins of integer nanoseconds are not all equally wide).
		if chi > 60 {
			t.Errorf("retry %d: chi-square %.1f, bins %v", n, chi, bins)
		}
		mean := sum / draws
		if math.Abs(mean-float64(c)/2) > float64(c)*0.01 {
			t.Errorf("retry %d: mean %.1f, want %.1f", n, mean, float64(c)/2)
		}
		if lo > c/100 || hi < c-c/100 {
			t.Errorf("retry %d: range [%v, %v] of [0, %v]", n, lo, hi, c)
		}
	}
}

func r45nth(p *Policy, n int) time.Duration {
	i := 0
	for d := range p.Delays() {
		if i == n {
			return d
		}
		i++
	}
	return -1
}

// Decorrelated: once at MaxDelay, min(MaxDelay, uniform(BaseDelay,
// 3*MaxDelay)) is below MaxDelay with probability
// (MaxDelay-BaseDelay)/(3*MaxDelay-BaseDelay), about a third (the doc).
func TestReview45DecorrelatedSitsAtMaxDelay(t *testing.T) {
	p := New(Jitter(Decorrelated), BaseDelay(100*time.Millisecond), MaxDelay(time.Second))
	reached, below, after := false, 0, 0
	atMax, dropNext := 0, 0
	prev := time.Duration(0)
	i := 0
	for d := range p.Delays() {
		if prev == time.Second {
			atMax++
			if d < time.Second {
				dropNext++
			}
		}
		prev = d
		if reached {
			after++
			if d < time.Second {
				below++
			}
		}
		if d == time.Second {
			reached = true
		}
		i++
		if i == 100000 {
			break
		}
	}
	want := float64(time.Second-100*time.Millisecond) / float64(3*time.Second-100*time.Millisecond)
	if got := float64(dropNext) / float64(atMax); math.Abs(got-want) > 0.02 {
		t.Errorf("right after a MaxDelay, %.1f%% dropped below it, want %.1f%% (after reaching it, %d of %d below)", 100*got, 100*want, below, after)
	}
}
