package httpclient_test

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// The top retries quickly (2-20 ms backoff); the hops' backoff (full jitter
// up to hopMax) often does not fit the propagated budget, so they give up
// after one attempt without the signal and the top retries: two layers
// retry within one top call.
func TestReview51_MixedBackoffAmplification(t *testing.T) {
	for _, tc := range []struct{ topBudget, hopBase, hopMax time.Duration }{
		{60 * time.Millisecond, 100 * time.Millisecond, 100 * time.Millisecond},
	} {
		t.Run(fmt.Sprintf("%v/%v", tc.topBudget, tc.hopBase), func(t *testing.T) {
			hops, d := review51Chain(t, false, review51Opts{baseDelay: tc.hopBase, maxDelay: tc.hopMax, consecutive: 1 << 30})
			d.status.Store(503)
			top := review51Top(review51Opts{})
			const calls = 20
			hist := map[int64]int{}
			var maxN int64
			for range calls {
				before := d.seen.Load()
				ctx, cancel := context.WithTimeout(context.Background(), tc.topBudget)
				_ = top.GetJSON(ctx, hops[0].srv.URL, nil)
				cancel()
				time.Sleep(tc.topBudget)
				n := d.seen.Load() - before
				hist[n]++
				maxN = max(maxN, n)
			}
			t.Logf("D per top call: %v, mean %.2f, max %d (A %d B %d C %d)", hist, float64(d.seen.Load())/calls, maxN, hops[0].seen.Load(), hops[1].seen.Load(), hops[2].seen.Load())
			for i, h := range hops {
				if n := h.seen.Load(); n != calls {
					t.Errorf("hop %d saw %d requests for %d top calls: a layer above it retried", i, n, calls)
				}
			}
			if maxN > 3 {
				t.Errorf("a top call reached the bottom %d times (> 3, the one retrying layer's attempts)", maxN)
			}
		})
	}
}
