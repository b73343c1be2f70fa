package retrypolicy

import (
	"sort"
	"sync"
	"testing"
	"time"
)

// Many goroutines hammer Take on a quota of a short window, in real time:
// the retries taken in any span of one window (by the time Take returned
// true) stay within the window's allowance plus a bucket's share (for a
// span that straddles buckets). A goroutine descheduled between reading
// the clock and its compare-and-swap for a window or more counts its
// retry in a slot the current bucket now holds, which resets that bucket's
// count.
func TestReview45QuotaStaleGoroutinesUnderLoad(t *testing.T) {
	const window = 10 * time.Millisecond
	q := NewQuota(0, 1000, window) // 10 a window, 1 a bucket (1 ms)
	var mu sync.Mutex
	var got [][2]time.Duration
	start := time.Now()
	var wg sync.WaitGroup
	stop := start.Add(3 * time.Second)
	for range 40 { // spinning goroutines: preempted inside Take, they wait out the others' slices
		wg.Go(func() {
			var mine [][2]time.Duration
			for time.Now().Before(stop) {
				b := time.Since(start)
				if q.Take() {
					mine = append(mine, [2]time.Duration{b, time.Since(start)})
				}
			}
			mu.Lock()
			got = append(got, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	// Each retry was taken within [before, after] of its Take: count those
	// surely inside a span of one window, starting at each retry's before.
	sort.Slice(got, func(i, j int) bool { return got[i][0] < got[j][0] })
	worst, at := 0, time.Duration(0)
	for i := range got {
		n := 0
		for j := i; j < len(got) && got[j][0] < got[i][0]+window; j++ {
			if got[j][1] < got[i][0]+window {
				n++
			}
		}
		if n > worst {
			worst, at = n, got[i][0]
		}
	}
	t.Logf("%d retries in 3 s (allowance 10 a 10 ms: %d); most surely within one 10 ms span: %d (from %v)", len(got), 3000, worst, at)
	// Bucket-aligned windows from the quota's start (just before start):
	// each holds at most 10, so all of them together at most 10 a window.
	end := time.Duration(0)
	for _, g := range got {
		end = max(end, g[1])
	}
	bound := 10 * (int(end/window) + 2)
	t.Logf("total %d, bound %d (10 for each window of the run, one spare)", len(got), bound)
	if len(got) > bound {
		t.Errorf("%d retries over %v: more than 10 a window (%d)", len(got), end, bound)
	}
	if worst > 12 {
		t.Errorf("%d retries taken within one window's span; allowance 10 (+1 a bucket's share for straddling)", worst)
	}
}
