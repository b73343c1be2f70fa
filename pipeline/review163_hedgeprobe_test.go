package pipeline

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/hedge"
	"github.com/resiliencekit/resiliencekit/resilience"
	"github.com/resiliencekit/resiliencekit/throttle"
)

// A hedge that the throttle let through as its bucket's probe, then found
// moot after the listener heard of it (its first attempt failed alone
// meanwhile), is not sent (stages.go: "counted, not sent"): the bucket's
// probe is then owed, as for any attempt not sent after all.
func TestReview163MootHedgeProbeIsOwed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		th := throttle.New()
		var hedged atomic.Int64
		l := resilience.ListenerFunc(func(e resilience.Event) {
			if e.Kind == resilience.EventHedged {
				hedged.Add(1)
				time.Sleep(50 * time.Millisecond) // a slow listener: the first attempt fails meanwhile
			}
		})
		p := New(WithThrottle(th), WithHedging(hedge.New(hedge.Delay(100*time.Millisecond), hedge.MaxShare(1))), WithListener(l))
		pump163(t, th, 2_000)
		time.Sleep(1950 * time.Millisecond) // t = 1.95 s: bucket 1, its probe unused

		var sent atomic.Int64
		var first atomic.Bool
		op := func(ctx context.Context) (int, error) {
			sent.Add(1)
			if first.CompareAndSwap(false, true) {
				time.Sleep(120 * time.Millisecond) // past the hedge's delay, into bucket 2
				return 0, errFail163
			}
			return 0, errFail163
		}
		Do(context.Background(), p, op)
		synctest.Wait()
		if sent.Load() != 1 {
			t.Skipf("setup: %d sent (want the first attempt alone)", sent.Load())
		}
		if hedged.Load() != 1 {
			t.Skipf("setup: %d hedges reported", hedged.Load())
		}
		now := time.Since(time.Time{}) // unused; the bucket is 2 if the timing held
		_ = now
		// Bucket 2: its probe went to the moot hedge, which was not sent.
		before := sent.Load()
		for range 10 {
			Do(context.Background(), p, func(context.Context) (int, error) {
				sent.Add(1)
				return 0, errFail163
			})
		}
		if got := sent.Load() - before; got == 0 {
			t.Errorf("bucket whose probe was a hedge not sent (moot after the listener heard of it) got no probe: 0 of 10 calls sent at p=%.4f", th.RejectProbability())
		}
	})
}
