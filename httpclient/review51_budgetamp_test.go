package httpclient_test

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// Amplification when the caller's propagated budget cuts the hops' backoffs:
// a hop that gives up after one attempt for want of time sends no signal, so
// the layer above retries too. Each layer uses the same policy (3 attempts).
func TestReview51_BudgetAmplification(t *testing.T) {
	for _, tc := range []struct {
		topBudget, base, maxDelay time.Duration
	}{
		{100 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond},
	} {
		t.Run(fmt.Sprintf("%v/%v", tc.topBudget, tc.base), func(t *testing.T) {
			hops, d := review51Chain(t, false, review51Opts{baseDelay: tc.base, maxDelay: tc.maxDelay, consecutive: 1 << 30})
			d.status.Store(503)
			// the top uses the hops' own policy too
			top := review51TopPolicy(tc.base, tc.maxDelay)
			const calls = 15
			hist := map[int64]int{}
			var maxN int64
			for range calls {
				before := d.seen.Load()
				ctx, cancel := context.WithTimeout(context.Background(), tc.topBudget)
				_ = top.GetJSON(ctx, hops[0].srv.URL, nil)
				cancel()
				time.Sleep(tc.topBudget / 2) // let stragglers land
				n := d.seen.Load() - before
				hist[n]++
				maxN = max(maxN, n)
			}
			t.Logf("D requests per top call: histogram %v, mean %.2f, max %d (hops A %d B %d C %d for %d calls)", hist, float64(d.seen.Load())/calls, maxN, hops[0].seen.Load(), hops[1].seen.Load(), hops[2].seen.Load(), calls)
			if maxN > 3 {
				t.Errorf("a top call reached the bottom %d times: more than one layer retried (bottom's 3 attempts)", maxN)
			}
		})
	}
}
