package httpclient_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/resiliencekit/resiliencekit/httpclient"
	"github.com/resiliencekit/resiliencekit/pipeline"
	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// A hanging bottom, every hop (and the top) with a 100 ms attempt timeout and
// 3 attempts: how many requests reach D per top call, and how long.
func TestReview51_SlowBottomAttemptTimeouts(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		t.Run(fmt.Sprintf("h2=%v", h2), func(t *testing.T) {
			hops, d := review51Chain(t, h2, review51Opts{attemptTO: 100 * time.Millisecond, consecutive: 1 << 30})
			d.delay.Store(int64(2 * time.Second))
			var base http.RoundTripper
			if h2 {
				base = d.srv.Client().Transport
			}
			p := pipeline.New(pipeline.WithAttemptTimeout(100*time.Millisecond), pipeline.WithRetry(retrypolicy.New(retrypolicy.MaxAttempts(3), retrypolicy.BaseDelay(2*time.Millisecond), retrypolicy.MaxDelay(20*time.Millisecond))))
			top := httpclient.New(httpclient.WithPipeline(p), httpclient.Base(base))
			const calls = 6
			var worst int64
			hist := map[int64]int{}
			for range calls {
				before := d.seen.Load()
				start := time.Now()
				err := top.GetJSON(context.Background(), hops[0].srv.URL, nil)
				el := time.Since(start)
				time.Sleep(150 * time.Millisecond)
				n := d.seen.Load() - before
				hist[n]++
				worst = max(worst, n)
				t.Logf("D %d in %v: %v", n, el.Round(time.Millisecond), err)
			}
			t.Logf("hist %v; A %d B %d C %d", hist, hops[0].seen.Load(), hops[1].seen.Load(), hops[2].seen.Load())
			if worst > 3 {
				t.Errorf("a top call reached D %d times", worst)
			}
		})
	}
}
