package breaker_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/resiliencekit/resiliencekit/breaker"
	"github.com/resiliencekit/resiliencekit/resilience"
)

// Callers that wait when open all get through once the dependency is
// back, well before their deadlines.
func TestReview70WaitBacklog(t *testing.T) {
	for _, n := range []uint32{1, 4} {
		synctest.Test(t, func(t *testing.T) {
			b := breaker.New("w", breaker.HalfOpenRequests(n), breaker.OpenTimeout(100*time.Millisecond))
			start := time.Now()
			healthyAt := start.Add(time.Second)
			dep := func(ctx context.Context) error {
				if time.Now().Before(healthyAt) {
					time.Sleep(5 * time.Millisecond)
					return r70Err
				}
				time.Sleep(20 * time.Millisecond)
				return nil
			}
			var wg sync.WaitGroup
			var bad atomic.Int32
			var last atomic.Int64
			for i := range 1000 {
				wg.Go(func() {
					time.Sleep(time.Duration(i) * time.Millisecond)
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					defer cancel()
					for {
						err := b.Execute(ctx, dep)
						if err == nil {
							break
						}
						if !breaker.IsRejection(err) {
							if time.Now().After(healthyAt.Add(50 * time.Millisecond)) {
								bad.Add(1)
								return
							}
							time.Sleep(time.Millisecond)
							continue
						}
						if werr := b.Wait(ctx, err); werr != nil {
							bad.Add(1)
							t.Errorf("Wait gave up at %v: %v", time.Since(start), werr)
							return
						}
					}
					if d := time.Since(start); int64(d) > last.Load() {
						last.Store(int64(d))
					}
				})
			}
			wg.Wait()
			if bad.Load() != 0 {
				t.Errorf("n=%d: %d callers failed", n, bad.Load())
			}
			t.Logf("n=%d: last success at %v", n, time.Duration(last.Load()))
		})
	}
}

// SetMode churn while calls are in flight against a healthy dependency:
// nothing but ForcedOpen rejects, and Normal at the end is closed.
func TestReview70ForceChurn(t *testing.T) {
	b := breaker.New("f", breaker.HalfOpenRequests(2))
	var stop atomic.Bool
	var wg sync.WaitGroup
	var wrong atomic.Int32
	var firstWrong atomic.Value
	for range 50 {
		wg.Go(func() {
			for !stop.Load() {
				err := b.Execute(context.Background(), func(context.Context) error { return nil })
				if err != nil && !errors.Is(err, breaker.ErrForcedOpen) {
					wrong.Add(1)
					firstWrong.CompareAndSwap(nil, err.Error())
				}
			}
		})
	}
	modes := []breaker.Mode{breaker.ForcedOpen, breaker.Normal, breaker.ForcedClosed, breaker.Disabled, breaker.ForcedOpen, breaker.Disabled, breaker.Normal}
	deadline := time.Now().Add(2 * time.Second)
	for i := 0; time.Now().Before(deadline); i++ {
		_ = b.SetMode(context.Background(), modes[i%len(modes)], "t")
		time.Sleep(50 * time.Microsecond)
	}
	_ = b.SetMode(context.Background(), breaker.Normal, "t")
	stop.Store(true)
	wg.Wait()
	if wrong.Load() != 0 {
		t.Errorf("%d non-forced rejections of a healthy dependency, first: %v", wrong.Load(), firstWrong.Load())
	}
	if b.State() != resilience.StateClosed {
		t.Errorf("state %v", b.State())
	}
}

// Force while failing probes are in flight.
func TestReview70ForceInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("fi", breaker.HalfOpenRequests(3), breaker.OpenTimeout(100*time.Millisecond))
		r70Fail(b, 5)
		time.Sleep(101 * time.Millisecond)
		release := make(chan struct{})
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(func() {
				_ = b.Execute(context.Background(), func(context.Context) error { <-release; return nil })
			})
		}
		synctest.Wait()
		_ = b.SetMode(context.Background(), breaker.ForcedOpen, "op")
		if err := b.Execute(context.Background(), func(context.Context) error { return nil }); !errors.Is(err, breaker.ErrForcedOpen) {
			t.Fatalf("forced open: %v", err)
		}
		close(release)
		wg.Wait()
		_ = b.SetMode(context.Background(), breaker.Normal, "op")
		if st := b.State(); st != resilience.StateClosed {
			t.Errorf("after probes succeeded under ForcedOpen, Normal: %v", st)
		}
		if err := b.Execute(context.Background(), func(context.Context) error { return nil }); err != nil {
			t.Errorf("%v", err)
		}
		// Forced open then Normal while open: next probe on time.
		r70Fail(b, 5)
		_ = b.SetMode(context.Background(), breaker.ForcedOpen, "op")
		time.Sleep(50 * time.Millisecond)
		_ = b.SetMode(context.Background(), breaker.Normal, "op")
		time.Sleep(51 * time.Millisecond)
		if np := b.NextProbe(); !np.IsZero() && np.After(time.Now()) {
			t.Errorf("NextProbe %v in the future after open timeout", np)
		}
		if err := b.Execute(context.Background(), func(context.Context) error { return nil }); err != nil {
			t.Errorf("probe after open timeout: %v", err)
		}
	})
}

// Group: bounded, one breaker per key, under many goroutines.
func TestReview70GroupBound(t *testing.T) {
	var made sync.Map
	var calls atomic.Int32
	g := breaker.NewGroup(1000, func(k string) *breaker.Breaker {
		calls.Add(1)
		if _, loaded := made.LoadOrStore(k, true); loaded {
			t.Errorf("key %s made twice", k)
		}
		return breaker.New(k)
	})
	var wg sync.WaitGroup
	var got, refused atomic.Int32
	for i := range 64 {
		wg.Go(func() {
			for j := range 2000 {
				k := fmt.Sprint((i*131 + j) % 5000)
				b, ok := g.Get(k)
				if ok {
					got.Add(1)
					if b == nil || b.Name() != k {
						t.Errorf("wrong breaker for %s", k)
						return
					}
				} else {
					refused.Add(1)
					if b != nil {
						t.Errorf("refused with breaker")
					}
				}
			}
		})
	}
	wg.Wait()
	if g.Len() != 1000 || calls.Load() != 1000 {
		t.Errorf("len %d calls %d", g.Len(), calls.Load())
	}
	// newBreaker that panics leaves the group usable.
	g2 := breaker.NewGroup(2, func(k int) *breaker.Breaker {
		if k == 1 {
			panic("x")
		}
		return breaker.New("k")
	})
	func() { defer func() { _ = recover() }(); g2.Get(1) }()
	if _, ok := g2.Get(2); !ok || g2.Len() != 1 {
		t.Errorf("after panic: len %d", g2.Len())
	}
}

type r70Block struct{ ch chan struct{} }

func (l r70Block) OnEvent(e resilience.Event) {
	if e.Kind == resilience.EventStateChange && e.To == resilience.StateOpen {
		<-l.ch
	}
}
