package retrypolicy

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// Steady traffic; a 20 s outage; then a dependency that fails 3% of
// attempts. Count calls refused by the quota that the same policy without
// a quota completes, per second after the outage.
func TestReview86AfterOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := NewQuota(0.1, 10, 10*time.Second)
		withQ := New(WithQuota(q), BaseDelay(0), MaxAttempts(4))
		start := time.Now()
		outage := func() bool { s := time.Since(start); return s >= 10*time.Second && s < 30*time.Second }
		r := rand.New(rand.NewPCG(1, 2))
		var mu sync.Mutex
		refused := map[int]int{}
		for time.Since(start) < 60*time.Second {
			// one call every 5 ms: 200/s
			fails := 0
			for fails < 4 && r.Float64() < 0.03 {
				fails++
			}
			n := 0
			_, err := Do(context.Background(), withQ, func(context.Context) (int, error) {
				n++
				if outage() || n <= fails {
					return 0, review86Err
				}
				return 1, nil
			})
			plainOK := fails < 4 && !outage()
			if err != nil && plainOK {
				mu.Lock()
				refused[int(time.Since(start)/time.Second)]++
				mu.Unlock()
				if !errors.Is(err, ErrQuotaExhausted) {
					t.Errorf("unexpected %v", err)
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
		for s := 0; s < 60; s++ {
			if refused[s] > 0 {
				t.Logf("second %d: %d calls refused that a plain client completes", s, refused[s])
			}
		}
		for s := 41; s < 60; s++ { // a window after the outage ended
			if refused[s] > 0 {
				t.Errorf("second %d (>%d s after the outage): %d calls refused", s, s-30, refused[s])
			}
		}
	})
}

// After an outage the quota refills within one window.
func TestReview86Refill(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := NewQuota(0.5, 0, time.Second)
		p := New(WithQuota(q), BaseDelay(0), MaxAttempts(2))
		for range 100 {
			Do(context.Background(), p, func(context.Context) (int, error) { return 0, nil })
			time.Sleep(10 * time.Millisecond)
		}
		full := q.Available()
		for range 100 {
			Do(context.Background(), p, func(context.Context) (int, error) { return 0, review86Err })
			time.Sleep(10 * time.Millisecond)
		}
		// healthy again
		for i := range 100 {
			Do(context.Background(), p, func(context.Context) (int, error) { return 0, nil })
			time.Sleep(10 * time.Millisecond)
			if i == 99 {
				if a := q.Available(); a < full {
					t.Errorf("a window after the outage: available %d < %d before it", a, full)
				}
			}
		}
		t.Logf("full %d now %d", full, q.Available())
	})
}

// Extreme constructor values.
func TestReview86Extremes(t *testing.T) {
	mustPanic := func(name string, f func()) {
		t.Helper()
		defer func() {
			if recover() == nil {
				t.Errorf("%s: no panic", name)
			}
		}()
		f()
	}
	for _, v := range []float64{math.NaN(), math.Inf(1), math.Inf(-1), -1, -math.SmallestNonzeroFloat64} {
		mustPanic("ratio", func() { NewQuota(v, 0, 0) })
		mustPanic("floor", func() { NewQuota(0, v, 0) })
	}
	for _, w := range []time.Duration{-1, 1, 9 * time.Millisecond, time.Duration(math.MinInt64)} {
		mustPanic("window", func() { NewQuota(0, 0, w) })
	}
	synctest.Test(t, func(t *testing.T) {
		type tc struct {
			ratio, floor float64
			w            time.Duration
		}
		for _, c := range []tc{
			{math.MaxFloat64, 0, 0}, {0, math.MaxFloat64, 0}, {math.MaxFloat64, math.MaxFloat64, math.MaxInt64},
			{0, 0, 10 * time.Millisecond}, {1e-300, 1e-300, math.MaxInt64}, {0, 1, math.MaxInt64}, {1, 0, math.MaxInt64},
			{0, float64(math.MaxInt64), 10 * time.Second}, {0, 0, 0},
		} {
			q := NewQuota(c.ratio, c.floor, c.w)
			p := New(WithQuota(q), BaseDelay(0), MaxAttempts(3))
			a0 := q.Available()
			var ops int
			var err error
			for range 20 {
				_, err = Do(context.Background(), p, func(context.Context) (int, error) { ops++; return 0, review86Err })
				time.Sleep(time.Millisecond)
			}
			t.Logf("%+v: available at start %d, ops %d over 20 calls, last err %v, available %d", c, a0, ops, err, q.Available())
			if ops < 20 {
				t.Errorf("%+v: first attempt refused", c)
			}
			if a0 < 0 {
				t.Errorf("negative Available")
			}
		}
		// zero and nil Quota
		var z Quota
		if !z.Take() || z.Available() != math.MaxInt {
			t.Errorf("zero quota limited")
		}
		var n *Quota
		if !n.Take() || n.Available() != math.MaxInt {
			t.Errorf("nil quota limited")
		}
		ops := 0
		Do(context.Background(), New(WithQuota(&z), BaseDelay(0), MaxAttempts(5)), func(context.Context) (int, error) { ops++; return 0, review86Err })
		if ops != 5 {
			t.Errorf("zero Quota limited retries: %d ops", ops)
		}
	})
}

// Concurrent Take never exceeds the allowance (one bucket, one window).
func TestReview86ConcurrentTake(t *testing.T) {
	for range 20 {
		q := NewQuota(1, 0, time.Hour) // buckets of 6 min: no bucket change
		p := New(WithQuota(q))
		for range 500 {
			Do(context.Background(), p, func(context.Context) (int, error) { return 0, nil })
		}
		want := q.Available() // floor(500/10) = 50
		var got atomic.Int64
		var wg sync.WaitGroup
		gate := make(chan struct{})
		for range 400 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-gate
				if q.Take() {
					got.Add(1)
				}
			}()
		}
		close(gate)
		wg.Wait()
		if got.Load() != int64(want) {
			t.Fatalf("took %d, allowance %d", got.Load(), want)
		}
	}
}

// Real time, bucket boundaries every ms, many goroutines: total retries stay
// within ratio*calls + floor*T + one window's allowance.
func TestReview86RealTimeBoundaries(t *testing.T) {
	q := NewQuota(0.2, 0, 10*time.Millisecond)
	p := New(WithQuota(q), BaseDelay(0), MaxAttempts(4))
	var calls, retries atomic.Int64
	stop := time.Now().Add(2 * time.Second)
	var wg sync.WaitGroup
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				calls.Add(1)
				n := 0
				Do(context.Background(), p, func(context.Context) (int, error) {
					n++
					if n > 1 {
						retries.Add(1)
					}
					return 0, review86Err
				})
				if n%7 == 0 {
					time.Sleep(100 * time.Microsecond)
				}
			}
		}()
	}
	wg.Wait()
	c, r := calls.Load(), retries.Load()
	t.Logf("calls %d retries %d (%.4f)", c, r, float64(r)/float64(c))
	if float64(r) > 0.2*float64(c)*1.02+100 {
		t.Errorf("retries %d over 0.2 of %d calls", r, c)
	}
}
