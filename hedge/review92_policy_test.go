package hedge_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/hedge"
)

// Concurrent Take never takes more than share*calls+1 of a window.
func TestReview92_TakeConcurrent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, tc := range []struct {
			share float64
			calls int
			want  int
		}{{0.1, 0, 1}, {0.1, 1, 2}, {0.1, 100, 11}, {1, 50, 51}, {0.5, 3, 3}, {1e-300, 1000, 1}} {
			p := hedge.New(hedge.MaxShare(tc.share))
			for range tc.calls {
				p.Called()
			}
			var got atomic.Int64
			var wg sync.WaitGroup
			for range 200 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 5 {
						if p.Take() {
							got.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			if int(got.Load()) != tc.want {
				t.Errorf("share %v calls %d: took %d, want %d", tc.share, tc.calls, got.Load(), tc.want)
			}
			// a new window: the budget comes back
			time.Sleep(21 * time.Second)
			if !p.Take() {
				t.Errorf("share %v: no hedge in a new window", tc.share)
			}
		}
	})
}

// The quantile: after 32 latencies, the q-quantile; none before.
func TestReview92_Quantile(t *testing.T) {
	p := hedge.New(hedge.Quantile(0.95))
	for i := 1; i <= 31; i++ {
		p.Observe(time.Duration(i) * time.Millisecond)
		if _, ok := p.After(); ok {
			t.Fatalf("hedges after %d samples", i)
		}
	}
	p.Observe(32 * time.Millisecond)
	d, ok := p.After()
	if !ok || d != 30*time.Millisecond {
		t.Errorf("after 32: %v %v", d, ok)
	}
	z := hedge.New(hedge.Quantile(0.5))
	for range 64 {
		z.Observe(0)
		z.Observe(-time.Second)
	}
	if d, ok := z.After(); !ok || d != 1 {
		t.Errorf("zeros: %v %v", d, ok)
	}
	var nilp *hedge.Policy
	nilp.Observe(time.Second)
	nilp.Called()
	if nilp.Take() || nilp.Extra() != 0 || nilp.Learns() {
		t.Error("nil policy")
	}
	var zero hedge.Policy
	zero.Called()
	zero.Observe(time.Second)
	if zero.Take() {
		t.Error("zero policy took")
	}
	if _, ok := zero.After(); ok {
		t.Error("zero hedges")
	}
	// extreme: a huge latency does not overflow
	h := hedge.New(hedge.Quantile(0.99))
	for range 64 {
		h.Observe(time.Duration(1<<63 - 1))
	}
	if d, ok := h.After(); !ok || d <= 0 {
		t.Errorf("huge: %v %v", d, ok)
	}
}
