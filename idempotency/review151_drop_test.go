package idempotency

import (
	"runtime"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// (b): a guard dropped while it asks a store that is down asks once a
// second until the store answers or it fails open, FailOpenAfter and a
// few seconds at most (documented: the timer chain holds it so long), and
// is collected after.
func TestReview151DroppedGuardWhileProbing(t *testing.T) {
	for _, foa := range []time.Duration{10 * time.Second, time.Hour} {
		t.Run(foa.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newR151Store()
				s.mode.Store(r151Down)
				var collected atomic.Bool
				func() {
					g := r151Guard(s, nil, FailOpenAfter(foa))
					runtime.AddCleanup(g, func(*atomic.Bool) { collected.Store(true) }, &collected)
					r151Run(t, g, "x")
				}()
				time.Sleep(foa + 5*time.Minute)
				for range 5 {
					runtime.GC()
					time.Sleep(time.Millisecond)
				}
				p := s.probeBegins.Load()
				if !collected.Load() {
					t.Errorf("FailOpenAfter(%v): a guard dropped FailOpenAfter and 5 min ago is not collected; its store probed %d times since", foa, p)
				}
				if max := int64(foa/time.Second) + 10; p > max {
					t.Errorf("FailOpenAfter(%v): %d probes, want %d at most (one a second until it failed open)", foa, p, max)
				}
				s.mode.Store(r151Healthy)
				time.Sleep(2 * time.Second)
			})
		})
	}
}
