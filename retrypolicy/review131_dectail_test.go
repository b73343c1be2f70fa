package retrypolicy

import (
	"testing"
	"time"
)

// Decorrelated over the long run (retries 20 to 40): the doc's figures,
// a mean of about half MaxDelay, about a third of the delays at it, and a
// third of those after one at MaxDelay below it (review131 found the
// former doc's "stays near it" wrong: half the delays are under half).
func TestReview131DecorrelatedTailStaysNear(t *testing.T) {
	base, maxD := 100*time.Millisecond, 10*time.Second
	p := New(Jitter(Decorrelated), BaseDelay(base), MaxDelay(maxD))
	var n, atMax, belowHalf int
	var sum float64
	var afterMax, afterMaxBelow int
	for range 20000 {
		prev := time.Duration(0)
		for i, d := range review131Draws(p, 40) {
			if i >= 20 {
				n++
				sum += float64(d)
				if d == maxD {
					atMax++
				}
				if d < maxD/2 {
					belowHalf++
				}
				if prev == maxD {
					afterMax++
					if d < maxD {
						afterMaxBelow++
					}
				}
			}
			prev = d
		}
	}
	t.Logf("tail: mean %v (%.2f of MaxDelay), at MaxDelay %.3f, under half %.3f; after MaxDelay, below it %.3f",
		time.Duration(sum/float64(n)), sum/float64(n)/float64(maxD), float64(atMax)/float64(n), float64(belowHalf)/float64(n), float64(afterMaxBelow)/float64(afterMax))
	mean, at, below := sum/float64(n)/float64(maxD), float64(atMax)/float64(n), float64(afterMaxBelow)/float64(afterMax)
	if mean < 0.45 || mean > 0.6 || at < 0.25 || at > 0.4 || below < 0.3 || below > 0.37 {
		t.Errorf("decorrelated tail: mean %.2f of MaxDelay, %.2f at it, %.2f below it after it; the doc says about a half, a third, a third", mean, at, below)
	}
}
