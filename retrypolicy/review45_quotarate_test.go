package retrypolicy

import (
	"testing"
	"testing/synctest"
	"time"
)

// The quota counts calls reading the clock once in up to 64 calls "while
// calls are frequent (every call while they are rare)". After a busy spell
// the traffic drops; the calls of the quiet spell that follows, with no
// retry in it to read the clock, are counted in the bucket of the busy
// spell, which then leaves the window: a window of calls the quota does
// not see when the dependency then fails.
func TestReview45QuotaCountsCallsAfterRateDrop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := NewQuota(1, 0, 10*time.Second) // retries up to the calls of the window
		// 20 s of 2,000 calls a second.
		for range 20000 {
			for range 2 {
				q.deposit()
			}
			time.Sleep(time.Millisecond)
		}
		// 30 s of 5 calls a second, all succeeding (no retry reads the clock).
		for range 150 {
			q.deposit()
			time.Sleep(200 * time.Millisecond)
		}
		// The window holds 50 calls: the quota should allow 50 retries over it, 5 in this tenth.
		inWindow := q.calls.Sum(q.clock.Now(&q.calls))
		got := q.Available()
		t.Logf("calls the quota sees in its window: %d of 50; Available %d (want 5)", inWindow, got)
		if got < 4 {
			t.Errorf("after a drop in traffic the quota saw %d of the window's 50 calls: Available %d, want 5", inWindow, got)
		}
	})
}
