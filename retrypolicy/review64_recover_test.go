package retrypolicy_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// After an outage empties the quota (recommended 0.1, 10/s, 10 s), how long
// until a healthy dependency's blips are retried again? 100 calls/s; outage
// 5 s (every attempt fails); then each call fails its first attempt with
// probability 5% (deterministic: every 20th) and succeeds on retry.
func TestReview64RecoveryAfterOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := retrypolicy.NewQuota(0.1, 10, 10*time.Second)
		p := retrypolicy.New(retrypolicy.WithQuota(q), retrypolicy.BaseDelay(0))
		start := time.Now()
		var lastRefused time.Duration
		refusedHealthy := 0
		i := 0
		for time.Since(start) < 30*time.Second {
			i++
			outage := time.Since(start) < 5*time.Second
			n := 0
			_, err := retrypolicy.Do(context.Background(), p, func(context.Context) (int, error) {
				n++
				if outage || (i%20 == 0 && n == 1) {
					return 0, errBlip64
				}
				return 1, nil
			})
			if !outage && err != nil {
				refusedHealthy++
				lastRefused = time.Since(start)
				if !errors.Is(err, retrypolicy.ErrQuotaExhausted) {
					t.Errorf("err %v", err)
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Logf("after the outage: %d healthy-call blips refused a retry, the last at %v (outage ended at 5s)", refusedHealthy, lastRefused)
		if refusedHealthy > 0 {
			t.Errorf("%d blips of a healthy dependency failed by the quota, the last %v after the outage", refusedHealthy, lastRefused-5*time.Second)
		}
	})
}

// Real time: the quiet-service case of TestReview64QuietCallCounts on a
// 100 ms window, calls 120 ms apart.
func TestReview64QuietCallCountsRealTime(t *testing.T) {
	q := retrypolicy.NewQuota(1, 0, 100*time.Millisecond)
	p := retrypolicy.New(retrypolicy.WithQuota(q), retrypolicy.BaseDelay(0))
	refused := 0
	for range 10 {
		if _, err := retrypolicy.Do(context.Background(), p, failOnce64()); err != nil {
			refused++
		}
		time.Sleep(120 * time.Millisecond)
	}
	if refused > 0 {
		t.Errorf("%d of 10 calls refused their one retry with ratio 1, no floor", refused)
	}
}
