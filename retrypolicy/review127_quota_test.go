package retrypolicy_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/retrypolicy"
)

// Concurrent Takes every 100 ms for 30 s: no bucket (a tenth of the window)
// gives more than a tenth of the window's allowance, no window more than
// it, and a drained quota refills as buckets leave the window.
func TestReview127QuotaConcurrentRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := retrypolicy.NewQuota(0, 10, 10*time.Second) // 100 a window, 10 a second
		start := time.Now()
		var perSecond [40]atomic.Int64
		for tick := 0; tick < 300; tick++ {
			var wg sync.WaitGroup
			for range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if q.Take() {
						perSecond[int(time.Since(start)/time.Second)].Add(1)
					}
				}()
			}
			wg.Wait()
			time.Sleep(100 * time.Millisecond)
		}
		total := int64(0)
		for s := 0; s < 30; s++ {
			n := perSecond[s].Load()
			if n > 10 {
				t.Errorf("second %d: %d retries, want at most 10", s, n)
			}
			total += n
			if s >= 9 {
				w := int64(0)
				for k := s - 9; k <= s; k++ {
					w += perSecond[k].Load()
				}
				if w > 100 {
					t.Errorf("window ending %d: %d", s, w)
				}
			}
		}
		// Sustained 80 a second against 10 a second: it should give about 10 a second throughout.
		if total < 280 {
			t.Errorf("only %d retries in 30 s; want about 300 (10 a second)", total)
		}
	})
}

// A quota drained by an outage refills a window later with no calls.
func TestReview127QuotaRefillsIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := retrypolicy.NewQuota(0.5, 0, time.Second)
		p := retrypolicy.New(retrypolicy.WithQuota(q))
		_ = p
		for range 100 {
			q.Take()
		}
		if q.Available() != 0 {
			t.Fatalf("available %d with no calls and no floor", q.Available())
		}
		time.Sleep(5 * time.Second)
		if q.Available() != 0 {
			t.Fatalf("available %d", q.Available())
		}
	})
}
