package hedge_test

import (
	"math"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/hedge"
)

// review157Traffic runs calls (Called at start, Take delay later, each
// on its own goroutine) and checks the documented bound: over each span
// of 1 to 10 whole seconds [a, b], the hedges due in it number fewer than
// share times the calls started in [a-1, b], plus 2 (share plus one,
// one more where not a whole number).
func review157Traffic(t *testing.T, share float64, starts []time.Duration, delay func(i int) time.Duration) (hedges int) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		p := hedge.New(hedge.Delay(time.Millisecond), hedge.MaxShare(share))
		t0 := time.Now()
		const secs = 40
		var mu sync.Mutex
		var calls, taken [secs]int
		var wg sync.WaitGroup
		for i, s := range starts {
			wg.Go(func() {
				time.Sleep(s)
				p.Called()
				sec := int(time.Since(t0) / time.Second)
				time.Sleep(delay(i))
				ok := p.Take()
				due := int(time.Since(t0) / time.Second)
				mu.Lock()
				calls[sec]++
				if ok {
					taken[due]++
				}
				mu.Unlock()
			})
		}
		wg.Wait()
		for b := range secs {
			for n := 1; n <= 10 && b-n+1 >= 0; n++ {
				a := b - n + 1
				h, c := 0, 0
				for s := a; s <= b; s++ {
					h += taken[s]
				}
				for s := max(a-1, 0); s <= b; s++ {
					c += calls[s]
				}
				if float64(h) >= share*float64(c)+2 {
					t.Errorf("span [%d, %d]: %d hedges for %d calls (with the second before): bound %v", a, b, h, c, math.Ceil(share*float64(c)+1))
				}
			}
		}
		for _, n := range taken {
			hedges += n
		}
	})
	return hedges
}

func TestReview157BudgetSteady(t *testing.T) {
	var starts []time.Duration
	for i := range 300 { // 10 a second for 30 s
		starts = append(starts, time.Duration(i)*100*time.Millisecond)
	}
	n := review157Traffic(t, 0.1, starts, func(int) time.Duration { return 50 * time.Millisecond })
	if n > 40 {
		t.Errorf("%d hedges for 300 calls over 30 s at 10%%", n)
	}
}

func TestReview157BudgetLateInSecond(t *testing.T) {
	var starts []time.Duration
	for s := range 30 { // 3 calls a second at .97-.99, hedges due in the next second
		for j := range 3 {
			starts = append(starts, time.Duration(s)*time.Second+970*time.Millisecond+time.Duration(j)*5*time.Millisecond)
		}
	}
	n := review157Traffic(t, 0.1, starts, func(int) time.Duration { return 40 * time.Millisecond })
	// 90 calls in 30 s: 10% is 9, and at most 1 more per 10 s span (3).
	if n > 9+4 {
		t.Errorf("%d hedges for 90 calls late in each second, at 10%%", n)
	}
}

func TestReview157BudgetBursty(t *testing.T) {
	var starts []time.Duration
	for s := 0; s < 30; s += 5 { // 50 calls at once every 5 s, at .999
		for range 50 {
			starts = append(starts, time.Duration(s)*time.Second+999*time.Millisecond)
		}
	}
	review157Traffic(t, 0.1, starts, func(i int) time.Duration { return time.Duration(1+i%7) * time.Millisecond })
}

// Concurrent Takes on either side of a second's edge, with many calls.
func TestReview157BudgetEdgeConcurrent(t *testing.T) {
	var starts []time.Duration
	for s := range 12 {
		for j := range 40 {
			starts = append(starts, time.Duration(s)*time.Second+time.Duration(900+j*2)*time.Millisecond)
		}
	}
	review157Traffic(t, 0.05, starts, func(i int) time.Duration { return time.Duration(50+i%100) * time.Millisecond })
}
