package hedge_test

import (
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/hedge"
)

// No delay before 32 latencies are known; then the 95th percentile of the
// last 256 (within one sample), whatever the order they came in, from
// many goroutines at once.
func TestReview138QuantileWarmupAndValue(t *testing.T) {
	p := hedge.New()
	for i := range 31 {
		p.Observe(time.Duration(i+1) * time.Millisecond)
	}
	if d, ok := p.After(); ok {
		t.Fatalf("hedges after %v with 31 latencies known", d)
	}
	p.Observe(32 * time.Millisecond)
	if _, ok := p.After(); !ok {
		t.Fatalf("no delay once 32 are known")
	}
	// Old slow samples, then 256 of 1..256 ms shuffled, from 8 goroutines.
	p = hedge.New()
	for range 512 {
		p.Observe(time.Hour)
	}
	vals := rand.Perm(256)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for _, v := range vals[g*32 : (g+1)*32] {
				p.Observe(time.Duration(v+1) * time.Millisecond)
			}
		})
	}
	wg.Wait()
	// The delay is updated every few observations, by whichever finds no
	// update under way, from the samples written by then: under
	// contention it may lag the last writes. Once more, one at a time.
	for _, v := range vals {
		p.Observe(time.Duration(v+1) * time.Millisecond)
	}
	d, ok := p.After()
	want := time.Duration(math.Ceil(0.95*256)) * time.Millisecond // nearest rank: 244 ms
	if !ok || d < want-2*time.Millisecond || d > want+time.Millisecond {
		t.Errorf("delay %v, %v; want about the 95th percentile %v", d, ok, want)
	}
	// Extreme quantiles and delays behave.
	for _, q := range []float64{math.SmallestNonzeroFloat64, math.Nextafter(1, 0)} {
		p := hedge.New(hedge.Quantile(q))
		for i := range 64 {
			p.Observe(time.Duration(i) * time.Millisecond) // a 0 among them
		}
		if d, ok := p.After(); !ok || d <= 0 || d > 63*time.Millisecond {
			t.Errorf("Quantile(%v): %v %v", q, d, ok)
		}
	}
	if d, ok := hedge.New(hedge.Delay(math.MaxInt64)).After(); !ok || d != math.MaxInt64 {
		t.Errorf("Delay(MaxInt64): %v %v", d, ok)
	}
	for _, bad := range []func(){
		func() { hedge.Quantile(math.NaN()) }, func() { hedge.Quantile(math.Inf(1)) }, func() { hedge.Quantile(0) },
		func() { hedge.Quantile(1) }, func() { hedge.MaxShare(math.NaN()) }, func() { hedge.MaxShare(0) },
		func() { hedge.MaxExtra(0) }, func() { hedge.Delay(0) }, func() { hedge.Delay(math.MinInt64) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("an invalid option did not panic")
				}
			}()
			bad()
		}()
	}
}
