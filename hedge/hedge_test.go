package hedge_test

import (
	"fmt"
	"math"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/resiliencekit/resiliencekit/hedge"
)

func TestQuantileIsLearnedFromRecentLatencies(t *testing.T) {
	p := hedge.New(hedge.Quantile(0.9))
	_, ok := p.After()
	assert.False(t, ok, "nothing known: no hedging")
	for i := range 31 {
		p.Observe(time.Duration(i+1) * time.Millisecond)
	}
	_, ok = p.After()
	assert.False(t, ok, "31 latencies are too few")
	for i := range 1000 { // 1..100 ms, over and over: only the last 256 count
		p.Observe(time.Duration(i%100+1) * time.Millisecond)
	}
	d, ok := p.After()
	assert.True(t, ok)
	assert.InDelta(t, 90*time.Millisecond, d, float64(3*time.Millisecond))
	for range 256 { // the latencies change: so does the delay
		p.Observe(5 * time.Millisecond)
	}
	d, _ = p.After()
	assert.Equal(t, 5*time.Millisecond, d)
}

func TestFixedDelayLearnsNothing(t *testing.T) {
	p := hedge.New(hedge.Delay(20*time.Millisecond), hedge.MaxExtra(2))
	assert.False(t, p.Learns())
	p.Observe(time.Second)
	d, ok := p.After()
	assert.True(t, ok)
	assert.Equal(t, 20*time.Millisecond, d)
	assert.Equal(t, 2, p.Extra())
}

func TestObserveUnderManyGoroutines(t *testing.T) {
	p := hedge.New()
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for i := range 10000 {
				p.Observe(time.Duration(i%100+1) * time.Millisecond)
				_, _ = p.After()
			}
		})
	}
	wg.Wait()
	d, ok := p.After()
	assert.True(t, ok)
	assert.InDelta(t, 95*time.Millisecond, d, float64(10*time.Millisecond))
}

func TestNilPolicyNeverHedges(t *testing.T) {
	var p *hedge.Policy
	_, ok := p.After()
	assert.False(t, ok)
	assert.Zero(t, p.Extra())
	p.Observe(time.Second)
}

func TestNonsenseOptionsPanic(t *testing.T) {
	for _, d := range []time.Duration{0, -1} {
		assert.PanicsWithValue(t, fmt.Sprintf("hedge: Delay(%v): d must be positive", d), func() { hedge.Delay(d) })
	}
	for _, q := range []float64{0, 1, -0.5, math.NaN()} {
		assert.PanicsWithValue(t, fmt.Sprintf("hedge: Quantile(%v): q must be in (0, 1)", q), func() { hedge.Quantile(q) })
	}
	assert.PanicsWithValue(t, "hedge: MaxExtra(0): n must be at least 1", func() { hedge.MaxExtra(0) })
}

// TestQuantileOfTheFirstSamples: the delay is known from the 32nd
// latency on, and is the exact quantile of those seen.
func TestQuantileOfTheFirstSamples(t *testing.T) {
	p := hedge.New(hedge.Quantile(0.5))
	for i := range 32 {
		_, ok := p.After()
		assert.False(t, ok, "after %d latencies", i)
		p.Observe(time.Duration(i+1) * time.Millisecond)
	}
	d, ok := p.After()
	assert.True(t, ok, "32 latencies are enough")
	assert.Equal(t, 16*time.Millisecond, d, "the median of 1..32 ms, rounded down")
}

// TestBudgetCapsTheHedges: hedges are at most MaxShare of the calls, plus
// one, over a window of 10 s; the allowance comes back as the window
// slides.
func TestBudgetCapsTheHedges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, tc := range []struct {
			share float64
			want  int
		}{{0.1, 11}, {0.25, 26}, {1, 101}} {
			p := hedge.New(hedge.MaxShare(tc.share))
			for range 100 {
				p.Called()
			}
			taken := 0
			for p.Take() {
				taken++
			}
			assert.Equal(t, tc.want, taken, "share %v", tc.share)
			time.Sleep(11 * time.Second)
			assert.True(t, p.Take(), "the window has moved on: one again")
		}
	})
}

func TestNilPolicyHasNoBudget(t *testing.T) {
	var p *hedge.Policy
	p.Called()
	assert.False(t, p.Take())
	assert.False(t, p.Learns())
}

func TestOptionsAtTheirBounds(t *testing.T) {
	assert.Equal(t, 1, hedge.New(hedge.MaxExtra(1)).Extra())
	assert.NotPanics(t, func() { hedge.MaxShare(1) })
	for _, s := range []float64{0, -0.1, 1.5, math.NaN()} {
		assert.PanicsWithValue(t, fmt.Sprintf("hedge: MaxShare(%v): share must be more than 0 and at most 1", s), func() { hedge.MaxShare(s) })
	}
}
