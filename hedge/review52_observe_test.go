package hedge_test

import (
	"math"
	"sync"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/hedge"
)

func TestReview52_ObserveConcurrentExtremes(t *testing.T) {
	for round := range 50 {
		p := hedge.New()
		var wg sync.WaitGroup
		vals := []time.Duration{0, -1, math.MinInt64, math.MaxInt64, time.Millisecond, 1}
		for g := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 200 {
					p.Observe(vals[(g+i)%len(vals)])
					if d, ok := p.After(); ok && d <= 0 {
						t.Errorf("round %d: After = %v, true", round, d)
					}
				}
			}()
		}
		wg.Wait()
	}
}

// Only the first samples, written concurrently: the quantile of exactly
// 32 latencies of 10ms is 10ms, never one taken from an unwritten slot.
func TestReview52_FirstUpdate(t *testing.T) {
	for range 2000 {
		p := hedge.New()
		var wg sync.WaitGroup
		for range 32 {
			wg.Add(1)
			go func() { defer wg.Done(); p.Observe(10 * time.Millisecond) }()
		}
		wg.Wait()
		if d, ok := p.After(); ok && d != 10*time.Millisecond {
			t.Fatalf("After = %v", d)
		}
	}
}
